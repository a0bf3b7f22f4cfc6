package servicemap

import (
	"iter"
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

	ports map[ServicePortName]*ServicePort
}

// Get returns one service port.
func (s *Snapshot) Get(name ServicePortName) (*ServicePort, bool) {
	panic("TODO(servicemap): implement")
}

// Len is the number of service ports.
func (s *Snapshot) Len() int { panic("TODO(servicemap): implement") }

// All yields every service port in ServicePortName order.
func (s *Snapshot) All() iter.Seq2[ServicePortName, *ServicePort] {
	panic("TODO(servicemap): implement")
}

// ChangeSet says what changed between two snapshots, so a mode can do a
// partial sync and conntrack can clean up after what went away.
type ChangeSet struct {
	// Full asks the mode to rewrite everything: the first snapshot, or a
	// change set merged after a failed sync when partial state is unknown.
	Full bool
	// Changed lists, sorted, every service port added, updated or removed,
	// including endpoint changes.
	Changed []ServicePortName
	// Removed holds the last version of each service port that no longer exists.
	Removed []*ServicePort
	// StaleEndpoints are endpoints that were removed from a surviving or
	// removed service port, or stopped serving.
	StaleEndpoints []StaleEndpoint
	// NewlyServed lists service ports that went from no serving endpoint to at
	// least one (clients of such ports were being refused).
	NewlyServed []ServicePortName
	// NodeChanged says this node's Node object changed.
	NodeChanged bool

	// ServiceChanges and EndpointChanges count the source events folded in.
	ServiceChanges, EndpointChanges int
	// FirstEvent is when the oldest event in this set was received (zero if none).
	FirstEvent time.Time
	// TriggerTimes holds, per changed service port, the earliest
	// endpoints.kubernetes.io/last-change-trigger-time of the EndpointSlices
	// that changed; it feeds kubeproxy_network_programming_duration_seconds.
	TriggerTimes map[ServicePortName]time.Time
}

// Empty says nothing changed.
func (c *ChangeSet) Empty() bool { panic("TODO(servicemap): implement") }

// Merge folds a later change set into c, as when a sync of c failed and the
// next one must cover both.
func (c *ChangeSet) Merge(later *ChangeSet) { panic("TODO(servicemap): implement") }
