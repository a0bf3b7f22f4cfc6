// Package sinktest provides a recording servicemap.Sink for the tests of the
// sources that feed one (clustersource, filesource), so each of them checks
// its calls against the same fake.
package sinktest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/servicemap"
)

// Recorder is a servicemap.Sink that logs every call and keeps the latest
// objects it was handed, so a test can check both the order of the calls and
// the state they add up to. It is safe for concurrent use: sources call it
// from informer or watcher goroutines while the test polls it.
//
// Each call is logged as one line:
//
//	update Service <namespace>/<name>
//	delete Service <namespace>/<name>
//	update EndpointSlice <namespace>/<name>
//	delete EndpointSlice <namespace>/<name>
//	update Node <name>
//	delete Node
//	synced
//	update ServiceCIDR <name> <cidr,cidr,...>
//	delete ServiceCIDR <name>
type Recorder struct {
	mu       sync.Mutex
	events   []string
	services map[types.NamespacedName]*v1.Service
	slices   map[types.NamespacedName]*discovery.EndpointSlice
	node     *v1.Node
	synced   int
	atSync   []string
	cidrs    map[string][]string
}

var (
	_ servicemap.Sink            = (*Recorder)(nil)
	_ servicemap.ServiceCIDRSink = (*Recorder)(nil)
)

// OnServiceCIDRUpdate records the call and keeps the ranges.
func (r *Recorder) OnServiceCIDRUpdate(name string, cidrs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("update ServiceCIDR %s %s", name, strings.Join(cidrs, ","))
	if r.cidrs == nil {
		r.cidrs = map[string][]string{}
	}
	r.cidrs[name] = slices.Clone(cidrs)
}

// OnServiceCIDRDelete records the call and forgets the object.
func (r *Recorder) OnServiceCIDRDelete(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("delete ServiceCIDR %s", name)
	delete(r.cidrs, name)
}

// ServiceCIDRs returns the ServiceCIDR objects held, by name.
func (r *Recorder) ServiceCIDRs() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.cidrs)
}

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{
		services: map[types.NamespacedName]*v1.Service{},
		slices:   map[types.NamespacedName]*discovery.EndpointSlice{},
	}
}

// State is a copy of what a Recorder holds at one moment.
type State struct {
	Services map[types.NamespacedName]*v1.Service
	Slices   map[types.NamespacedName]*discovery.EndpointSlice
	// Node is nil when no Node has been delivered or it was deleted.
	Node *v1.Node
}

// record appends one line to the log; the caller holds r.mu.
func (r *Recorder) record(format string, args ...any) {
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

// OnServiceUpdate records the call and keeps svc. A nil svc is logged but not
// kept, so a source bug shows up as an assertion failure, not a panic.
func (r *Recorder) OnServiceUpdate(svc *v1.Service) {
	recordUpdate(r, r.services, "Service", svc)
}

// OnServiceDelete records the call and forgets the Service.
func (r *Recorder) OnServiceDelete(key types.NamespacedName) {
	recordDelete(r, r.services, "Service", key)
}

// OnEndpointSliceUpdate records the call and keeps slice (nil: logged only).
func (r *Recorder) OnEndpointSliceUpdate(slice *discovery.EndpointSlice) {
	recordUpdate(r, r.slices, "EndpointSlice", slice)
}

// OnEndpointSliceDelete records the call and forgets the EndpointSlice.
func (r *Recorder) OnEndpointSliceDelete(key types.NamespacedName) {
	recordDelete(r, r.slices, "EndpointSlice", key)
}

// namespaced is what Recorder keeps by namespace/name: a pointer to an API
// object, so a nil one can be told apart.
type namespaced interface {
	comparable
	GetNamespace() string
	GetName() string
}

// recordUpdate logs the update of an object of kind and keeps it in kept (a
// nil one is logged only). kept is one of r's maps, made by New and never
// replaced, so the caller may read the field without r.mu.
func recordUpdate[T namespaced](r *Recorder, kept map[types.NamespacedName]T, kind string, obj T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var none T
	if obj == none {
		r.record("update %s <nil>", kind)
		return
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	r.record("update %s %s", kind, key)
	kept[key] = obj
}

// recordDelete logs the delete of an object of kind and forgets it (see
// recordUpdate).
func recordDelete[T any](r *Recorder, kept map[types.NamespacedName]T, kind string, key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("delete %s %s", kind, key)
	delete(kept, key)
}

// OnNodeUpdate records the call and keeps node (nil: logged only).
func (r *Recorder) OnNodeUpdate(node *v1.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if node == nil {
		r.record("update Node <nil>")
		return
	}
	r.record("update Node %s", node.Name)
	r.node = node
}

// OnNodeDelete records the call and forgets the Node.
func (r *Recorder) OnNodeDelete() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("delete Node")
	r.node = nil
}

// OnSynced records the call, counts it, and notes which Services and
// EndpointSlices were present (see PresentAtSync).
func (r *Recorder) OnSynced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("synced")
	r.synced++
	r.atSync = r.atSync[:0]
	for key := range r.services {
		r.atSync = append(r.atSync, "Service "+key.String())
	}
	for key := range r.slices {
		r.atSync = append(r.atSync, "EndpointSlice "+key.String())
	}
	slices.Sort(r.atSync)
}

// Events returns the calls logged since New or the last Take, oldest first.
func (r *Recorder) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Take returns the calls logged since New or the last Take, oldest first,
// and clears the log, so a test can check each step's calls on their own.
func (r *Recorder) Take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

// Service returns the Service namespace/name currently held, or nil.
func (r *Recorder) Service(namespace, name string) *v1.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.services[types.NamespacedName{Namespace: namespace, Name: name}]
}

// Slice returns the EndpointSlice namespace/name currently held, or nil.
func (r *Recorder) Slice(namespace, name string) *discovery.EndpointSlice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slices[types.NamespacedName{Namespace: namespace, Name: name}]
}

// Node returns the Node currently held, or nil.
func (r *Recorder) Node() *v1.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.node
}

// State returns a copy of everything currently held, taken under one lock
// so the Services, EndpointSlices and Node are consistent with each other.
// The objects themselves are shared, not copied; sinks must not mutate them.
func (r *Recorder) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return State{
		Services: maps.Clone(r.services),
		Slices:   maps.Clone(r.slices),
		Node:     r.node,
	}
}

// Synced reports whether OnSynced has been called at least once.
func (r *Recorder) Synced() bool {
	return r.SyncedCount() > 0
}

// SyncedCount returns how many times OnSynced has been called.
func (r *Recorder) SyncedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced
}

// PresentAtSync returns, sorted, the Services ("Service ns/name") and
// EndpointSlices ("EndpointSlice ns/name") held when OnSynced was last
// called, or nil before the first call. The Node is left out on purpose:
// OnSynced promises the Services and EndpointSlices, and a source must not
// hold it back waiting for the Node.
func (r *Recorder) PresentAtSync() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.atSync)
}
