package servicemap

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Tracker is the Sink that keeps the current Services, EndpointSlices and Node
// and turns them into snapshots. It is safe for concurrent use: sources call
// the On* methods from their goroutines, the sync loop calls Snapshot.
//
// Events are parsed when they arrive and only the services they touch are
// rebuilt at the next Snapshot, which shares every other *ServicePort with
// the previous snapshot.
type Tracker struct {
	nodeName string
	onChange func()
	clock    clock.PassiveClock

	mu sync.Mutex // guards the source state below
	// services holds each tracked service's port templates (no endpoints).
	services map[types.NamespacedName][]*ServicePort
	// slices holds every usable EndpointSlice by its own key; byService
	// indexes them by the service they belong to.
	slices    map[types.NamespacedName]*sliceEntry
	byService map[types.NamespacedName]map[string]*sliceEntry
	// dirty lists services to rebuild at the next snapshot.
	dirty map[types.NamespacedName]struct{}
	// triggerTimes is the earliest slice trigger time per dirty service.
	triggerTimes                  map[types.NamespacedName]time.Time
	serviceEvents, endpointEvents int
	firstEvent                    time.Time
	node                          *NodeInfo
	nodeChanged, synced           bool
	// serviceCIDRs are the ranges of each ServiceCIDR object;
	// allServiceCIDRs their sorted union, as snapshots carry it.
	serviceCIDRs    map[string][]netip.Prefix
	allServiceCIDRs []netip.Prefix

	snapMu sync.Mutex // serializes Snapshot; guards the published state below
	gen    uint64
	sorted []*ServicePort
	// built holds each service's ports as of the last snapshot, sorted.
	built map[types.NamespacedName][]*ServicePort

	// ignoreExternalIPs is kube-proxy's AllowServiceExternalIPs=false.
	ignoreExternalIPs bool
}

// IgnoreExternalIPs makes the map leave spec.externalIPs out of every
// service port, as kube-proxy does with its AllowServiceExternalIPs feature
// gate off (GA, on by default): no rule is programmed for them. Call it
// before the first event.
func (t *Tracker) IgnoreExternalIPs() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ignoreExternalIPs = true
}

// NewTracker returns a Tracker for the node named nodeName. onChange, if not
// nil, is called (without locks held) after every event that may change the
// next snapshot, and after OnSynced.
func NewTracker(nodeName string, onChange func()) *Tracker {
	return &Tracker{
		nodeName:     nodeName,
		onChange:     onChange,
		clock:        clock.RealClock{},
		services:     map[types.NamespacedName][]*ServicePort{},
		slices:       map[types.NamespacedName]*sliceEntry{},
		byService:    map[types.NamespacedName]map[string]*sliceEntry{},
		dirty:        map[types.NamespacedName]struct{}{},
		triggerTimes: map[types.NamespacedName]time.Time{},
		built:        map[types.NamespacedName][]*ServicePort{},
	}
}

var _ Sink = (*Tracker)(nil)

// notify calls onChange when an event mattered; callers must not hold mu.
func (t *Tracker) notify(changed bool) {
	if changed && t.onChange != nil {
		t.onChange()
	}
}

// noteEventLocked records when the oldest pending event arrived.
func (t *Tracker) noteEventLocked() {
	if t.firstEvent.IsZero() {
		t.firstEvent = t.clock.Now()
	}
}

func (t *Tracker) OnServiceUpdate(svc *v1.Service) {
	if svc == nil {
		return
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	ports := ServicePortsOf(svc)
	t.mu.Lock()
	ignore := t.ignoreExternalIPs
	t.mu.Unlock()
	if ignore {
		// The policy fields computed from spec.externalIPs stay, as
		// kube-proxy computes them from the spec whatever the gate.
		for _, p := range ports {
			p.ExternalIPs, p.HiddenExternalIPs = nil, p.ExternalIPs
		}
	}
	skipped := SkipServiceReason(svc) != ""
	t.notify(t.setService(key, ports, skipped))
}

func (t *Tracker) OnServiceDelete(key types.NamespacedName) {
	t.notify(t.setService(key, nil, true))
}

// setService stores (or, when gone, forgets) one service's templates and
// says whether the event counts. A skipped service that was never tracked
// changes nothing; one that was tracked is removed.
func (t *Tracker) setService(key types.NamespacedName, ports []*ServicePort, gone bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gone {
		if _, ok := t.services[key]; !ok {
			return false
		}
		delete(t.services, key)
	} else {
		t.services[key] = ports
	}
	t.dirty[key] = struct{}{}
	t.serviceEvents++
	t.noteEventLocked()
	return true
}

func (t *Tracker) OnEndpointSliceUpdate(slice *discovery.EndpointSlice) {
	if slice == nil {
		return
	}
	key := types.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}
	t.notify(t.setSlice(key, parseSlice(slice, t.nodeName)))
}

func (t *Tracker) OnEndpointSliceDelete(key types.NamespacedName) {
	t.notify(t.setSlice(key, nil))
}

// setSlice stores entry under key, or forgets the slice when entry is nil
// (deleted, or now ignored), and says whether the event counts.
func (t *Tracker) setSlice(key types.NamespacedName, entry *sliceEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.slices[key]
	if old == nil && entry == nil {
		return false
	}
	if old != nil {
		delete(t.byService[old.service], old.name)
		if len(t.byService[old.service]) == 0 {
			delete(t.byService, old.service)
		}
		delete(t.slices, key)
		t.markSliceChangeLocked(old)
	}
	if entry != nil {
		t.slices[key] = entry
		bySlice := t.byService[entry.service]
		if bySlice == nil {
			bySlice = map[string]*sliceEntry{}
			t.byService[entry.service] = bySlice
		}
		bySlice[entry.name] = entry
		t.markSliceChangeLocked(entry)
	}
	t.endpointEvents++
	t.noteEventLocked()
	return true
}

// markSliceChangeLocked marks the slice's service dirty and keeps its
// earliest trigger time. A deleted slice's own annotation is used, as
// kube-proxy does, since a delete carries no newer one.
func (t *Tracker) markSliceChangeLocked(e *sliceEntry) {
	t.dirty[e.service] = struct{}{}
	if e.triggerTime.IsZero() {
		return
	}
	if cur, ok := t.triggerTimes[e.service]; !ok || e.triggerTime.Before(cur) {
		t.triggerTimes[e.service] = e.triggerTime
	}
}

func (t *Tracker) OnNodeUpdate(node *v1.Node) {
	if node == nil {
		return
	}
	if node.Name != t.nodeName {
		klog.V(4).InfoS("Ignoring update of another node", "node", node.Name, "thisNode", t.nodeName)
		return
	}
	t.notify(t.setNode(nodeInfoOf(node)))
}

func (t *Tracker) OnNodeDelete() { t.notify(t.setNode(nil)) }

func (t *Tracker) setNode(info *NodeInfo) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if nodeInfoEqual(t.node, info) {
		return false
	}
	t.node = info
	t.nodeChanged = true
	t.noteEventLocked()
	return true
}

// nodeInfoOf copies what the map keeps of a Node, so the caller's object is
// never referenced.
func nodeInfoOf(node *v1.Node) *NodeInfo {
	info := &NodeInfo{
		Name:     node.Name,
		Labels:   maps.Clone(node.Labels),
		Deleting: node.DeletionTimestamp != nil,
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == ToBeDeletedTaint {
			info.ToBeDeleted = true
		}
	}
	// InternalIPs first, then ExternalIPs, as kube-proxy orders them
	// (utilnode.GetNodeHostIPs): the first of a family is the node's
	// primary IP of that family.
	for _, typ := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type != typ {
				continue
			}
			ip, ok := parseIPSloppy(strings.TrimSpace(a.Address))
			if !ok {
				klog.InfoS("Warning: ignoring unparseable node address", "node", node.Name, "address", a.Address)
				continue
			}
			info.Addresses = append(info.Addresses, ip)
		}
	}
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs = []string{node.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		if p, ok := parseCIDRSloppy(strings.TrimSpace(c)); ok {
			info.PodCIDRs = append(info.PodCIDRs, p)
		}
	}
	return info
}

func nodeInfoEqual(a, b *NodeInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.Deleting == b.Deleting && a.ToBeDeleted == b.ToBeDeleted && maps.Equal(a.Labels, b.Labels) &&
		slices.Equal(a.Addresses, b.Addresses) && slices.Equal(a.PodCIDRs, b.PodCIDRs)
}

func (t *Tracker) OnSynced() {
	t.mu.Lock()
	t.synced = true
	t.mu.Unlock()
	t.notify(true)
}

// Synced says every source has delivered its initial state.
func (t *Tracker) Synced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.synced
}

// Pending reports how many service and endpoint events arrived since the
// last Snapshot, for the *_changes_pending gauges.
func (t *Tracker) Pending() (services, endpoints int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.serviceEvents, t.endpointEvents
}

// serviceInput is what one dirty service is rebuilt from, captured under mu.
// Templates and slice entries are immutable, so it is read without locks.
type serviceInput struct {
	key       types.NamespacedName
	templates []*ServicePort
	slices    []*sliceEntry
}

// Snapshot returns a new snapshot and what changed since the previous call
// (Full on the first call). It is cheap when little changed: only services
// touched by events since the last call are rebuilt.
func (t *Tracker) Snapshot() (*Snapshot, *ChangeSet) {
	t.snapMu.Lock()
	defer t.snapMu.Unlock()

	inputs, changes, node, triggers := t.checkout()
	t.mu.Lock()
	serviceCIDRs := t.allServiceCIDRs
	t.mu.Unlock()

	var added, updated []*ServicePort
	var removed []ServicePortName
	if len(t.built) == 0 && len(inputs) > 0 {
		t.built = make(map[types.NamespacedName][]*ServicePort, len(inputs))
		changes.Changed = make([]ServicePortName, 0, len(inputs))
		added = make([]*ServicePort, 0, len(inputs))
	}
	// Rebuilding services in key order makes every list below come out sorted,
	// as each service's ports are sorted and sort after the previous service's.
	slices.SortFunc(inputs, func(a, b serviceInput) int {
		if c := strings.Compare(a.key.Namespace, b.key.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.key.Name, b.key.Name)
	})
	for _, in := range inputs {
		if len(in.slices) > 1 {
			slices.SortFunc(in.slices, func(a, b *sliceEntry) int { return strings.Compare(a.name, b.name) })
		}
		cur := buildServicePorts(in.templates, in.slices)
		added, updated, removed = t.diffService(in.key, cur, changes, added, updated, removed)
	}

	for _, name := range changes.Changed {
		if tt, ok := triggers[name.NamespacedName]; ok {
			if changes.TriggerTimes == nil {
				changes.TriggerTimes = map[ServicePortName]time.Time{}
			}
			changes.TriggerTimes[name] = tt
		}
	}

	t.sorted = applyEdits(t.sorted, removed, added, updated)
	t.gen++
	changes.Full = t.gen == 1
	return &Snapshot{Generation: t.gen, Node: node, ServiceCIDRs: serviceCIDRs, ports: t.sorted}, changes
}

// checkout takes the pending events' inputs and resets the pending state.
func (t *Tracker) checkout() ([]serviceInput, *ChangeSet, *NodeInfo, map[types.NamespacedName]time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	inputs := make([]serviceInput, 0, len(t.dirty))
	n := 0
	for key := range t.dirty {
		if t.services[key] != nil {
			n += len(t.byService[key])
		}
	}
	// All inputs' slice lists share one backing array.
	entries := make([]*sliceEntry, 0, n)
	for key := range t.dirty {
		in := serviceInput{key: key, templates: t.services[key]}
		if in.templates != nil {
			start := len(entries)
			for _, e := range t.byService[key] {
				entries = append(entries, e)
			}
			in.slices = entries[start:len(entries):len(entries)]
		}
		inputs = append(inputs, in)
	}
	changes := &ChangeSet{
		NodeChanged:     t.nodeChanged,
		ServiceChanges:  t.serviceEvents,
		EndpointChanges: t.endpointEvents,
		FirstEvent:      t.firstEvent,
	}
	triggers := t.triggerTimes
	clear(t.dirty)
	t.triggerTimes = map[types.NamespacedName]time.Time{}
	t.nodeChanged = false
	t.serviceEvents, t.endpointEvents = 0, 0
	t.firstEvent = time.Time{}
	return inputs, changes, t.node, triggers
}

// diffService compares a service's rebuilt ports with its last published
// ones, records the differences in changes and returns the edits to apply to
// the sorted port list. Unchanged ports keep their old pointer.
func (t *Tracker) diffService(key types.NamespacedName, cur []*ServicePort, changes *ChangeSet,
	added, updated []*ServicePort, removed []ServicePortName) ([]*ServicePort, []*ServicePort, []ServicePortName) {
	old := t.built[key]
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		var c int
		switch {
		case i == len(old):
			c = 1
		case j == len(cur):
			c = -1
		default:
			c = old[i].Name.Compare(cur[j].Name)
		}
		switch {
		case c < 0: // port gone
			o := old[i]
			changes.Changed = append(changes.Changed, o.Name)
			changes.Removed = append(changes.Removed, o)
			changes.StaleEndpoints = staleEndpoints(o.Name, o.Endpoints, nil, changes.StaleEndpoints)
			removed = append(removed, o.Name)
			i++
		case c > 0: // port new
			n := cur[j]
			changes.Changed = append(changes.Changed, n.Name)
			if n.HasServingEndpoint() {
				changes.NewlyServed = append(changes.NewlyServed, n.Name)
			}
			added = append(added, n)
			j++
		default:
			o, n := old[i], cur[j]
			if servicePortEqual(o, n) {
				cur[j] = o // share the published value
			} else {
				changes.Changed = append(changes.Changed, n.Name)
				changes.StaleEndpoints = staleEndpoints(n.Name, o.Endpoints, n.Endpoints, changes.StaleEndpoints)
				if !o.HasServingEndpoint() && n.HasServingEndpoint() {
					changes.NewlyServed = append(changes.NewlyServed, n.Name)
				}
				updated = append(updated, n)
			}
			i, j = i+1, j+1
		}
	}
	if len(cur) == 0 {
		delete(t.built, key)
	} else {
		t.built[key] = cur
	}
	return added, updated, removed
}
