package servicemap

import (
	"iter"
	"net/netip"
	"slices"
	"time"
)

// Snapshot is a consistent, immutable view of every service port the node
// must program. A new one is made for each sync; it is safe to read from any
// goroutine.
type Snapshot struct {
	// Generation increases by one with every snapshot a Tracker makes.
	Generation uint64
	// Node is nil until this node's Node object has been seen.
	Node *NodeInfo
	// ServiceCIDRs is the sorted union of the cluster's ServiceCIDR
	// objects' ranges (empty when the source has none); it must not be
	// modified.
	ServiceCIDRs []netip.Prefix

	// ports is sorted by name. Snapshots share unchanged *ServicePort values
	// (and, when no port was added or removed, nothing else), so the slice
	// must never be modified once the snapshot is published.
	ports []*ServicePort
}

// NewSnapshot assembles a snapshot from ready-made service ports, for
// tests and tools that have no API objects; the Tracker makes the real ones.
// Ports are sorted by name; a later port replaces an earlier one of the same
// name. The caller must not modify the ports afterwards.
func NewSnapshot(generation uint64, node *NodeInfo, ports ...*ServicePort) *Snapshot {
	sorted := slices.Clone(ports)
	slices.SortStableFunc(sorted, func(a, b *ServicePort) int { return a.Name.Compare(b.Name) })
	out := sorted[:0]
	for _, p := range sorted {
		if n := len(out); n > 0 && out[n-1].Name == p.Name {
			out[n-1] = p
			continue
		}
		out = append(out, p)
	}
	return &Snapshot{Generation: generation, Node: node, ports: out}
}

// Get returns one service port.
func (s *Snapshot) Get(name ServicePortName) (*ServicePort, bool) {
	if s == nil {
		return nil, false
	}
	i, ok := slices.BinarySearchFunc(s.ports, name, func(p *ServicePort, n ServicePortName) int { return p.Name.Compare(n) })
	if !ok {
		return nil, false
	}
	return s.ports[i], true
}

// Len is the number of service ports.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	return len(s.ports)
}

// All yields every service port in ServicePortName order.
func (s *Snapshot) All() iter.Seq2[ServicePortName, *ServicePort] {
	return func(yield func(ServicePortName, *ServicePort) bool) {
		if s == nil {
			return
		}
		for _, p := range s.ports {
			if !yield(p.Name, p) {
				return
			}
		}
	}
}

// ChangeSet says what changed between two snapshots, so a mode can do a
// partial sync and conntrack can clean up after what went away.
type ChangeSet struct {
	// Full asks the mode to rewrite everything: the first snapshot, or a
	// change set merged after a failed sync when partial state is unknown.
	Full bool
	// Changed lists, sorted, every service port added, updated or removed,
	// including endpoint changes. A port whose content is unchanged (say an
	// EndpointSlice update that only bumped resourceVersion) is not listed.
	Changed []ServicePortName
	// Removed holds the last version of each service port that no longer exists.
	Removed []*ServicePort
	// StaleEndpoints are endpoints that were removed from a surviving or
	// removed service port, or stopped serving; only endpoints that were
	// serving before are listed, as no traffic went to the others.
	StaleEndpoints []StaleEndpoint
	// NewlyServed lists service ports that went from no serving endpoint to at
	// least one (clients of such ports were being refused).
	NewlyServed []ServicePortName
	// NodeChanged says this node's Node object, or the cluster's service
	// CIDRs (Snapshot.ServiceCIDRs), changed.
	NodeChanged bool
	// Periodic says the sync runs because the sync period passed, not for
	// a change: modes then also check what others may have changed behind
	// their back (the iptables mode's canary chains).
	Periodic bool

	// ServiceChanges and EndpointChanges count the source events folded in.
	ServiceChanges, EndpointChanges int
	// FirstEvent is when the oldest event in this set was received (zero if none).
	FirstEvent time.Time
	// TriggerTimes holds, per changed service port, the earliest
	// endpoints.kubernetes.io/last-change-trigger-time of the EndpointSlices
	// that changed; it feeds kubeproxy_network_programming_duration_seconds.
	TriggerTimes map[ServicePortName]time.Time
}

// Empty says nothing changed that a mode must act on. Event counts do not
// matter: events that changed nothing leave the set empty.
func (c *ChangeSet) Empty() bool {
	return c == nil || (!c.Full && !c.NodeChanged && len(c.Changed) == 0 && len(c.Removed) == 0 &&
		len(c.StaleEndpoints) == 0 && len(c.NewlyServed) == 0)
}

// Merge folds a later change set into c, as when a sync of c failed and the
// next one must cover both. Removed and StaleEndpoints are concatenated: a
// port removed in c and re-added later stays in Removed (its old state may
// still need cleaning) and is in Changed (its new state must be written).
// c gets fresh slices and maps, so neither input's storage is shared.
func (c *ChangeSet) Merge(later *ChangeSet) {
	if c == nil || later == nil {
		return
	}
	c.Full = c.Full || later.Full
	c.Changed = unionSorted(c.Changed, later.Changed)
	c.Removed = slices.Concat(c.Removed, later.Removed)
	c.StaleEndpoints = slices.Concat(c.StaleEndpoints, later.StaleEndpoints)
	c.NewlyServed = unionSorted(c.NewlyServed, later.NewlyServed)
	c.NodeChanged = c.NodeChanged || later.NodeChanged
	c.Periodic = later.Periodic
	c.ServiceChanges += later.ServiceChanges
	c.EndpointChanges += later.EndpointChanges
	if c.FirstEvent.IsZero() || (!later.FirstEvent.IsZero() && later.FirstEvent.Before(c.FirstEvent)) {
		c.FirstEvent = later.FirstEvent
	}
	if len(c.TriggerTimes) > 0 || len(later.TriggerTimes) > 0 {
		merged := make(map[ServicePortName]time.Time, len(c.TriggerTimes)+len(later.TriggerTimes))
		for _, m := range []map[ServicePortName]time.Time{c.TriggerTimes, later.TriggerTimes} {
			for name, t := range m {
				if old, ok := merged[name]; !ok || t.Before(old) {
					merged[name] = t
				}
			}
		}
		c.TriggerTimes = merged
	}
}

// unionSorted merges two sorted name lists into a new sorted list without
// duplicates.
func unionSorted(a, b []ServicePortName) []ServicePortName {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := make([]ServicePortName, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := a[i].Compare(b[j]); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}
