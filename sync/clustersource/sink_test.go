package clustersource

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/servicemap"
)

// recordingSink is a servicemap.Sink that keeps the latest objects and a log
// of every call, so tests can check both state and event order.
type recordingSink struct {
	mu       sync.Mutex
	events   []string
	services map[types.NamespacedName]*v1.Service
	slices   map[types.NamespacedName]*discovery.EndpointSlice
	node     *v1.Node
	synced   bool
	// atSync is the set of objects present when OnSynced was called.
	atSync []string
}

var _ servicemap.Sink = (*recordingSink)(nil)

func newRecordingSink() *recordingSink {
	return &recordingSink{
		services: map[types.NamespacedName]*v1.Service{},
		slices:   map[types.NamespacedName]*discovery.EndpointSlice{},
	}
}

func nsName(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func (r *recordingSink) log(format string, args ...any) {
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recordingSink) OnServiceUpdate(svc *v1.Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := nsName(svc.Namespace, svc.Name)
	r.services[key] = svc
	r.log("service-update %s", key)
}

func (r *recordingSink) OnServiceDelete(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.services, key)
	r.log("service-delete %s", key)
}

func (r *recordingSink) OnEndpointSliceUpdate(slice *discovery.EndpointSlice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := nsName(slice.Namespace, slice.Name)
	r.slices[key] = slice
	r.log("slice-update %s", key)
}

func (r *recordingSink) OnEndpointSliceDelete(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.slices, key)
	r.log("slice-delete %s", key)
}

func (r *recordingSink) OnNodeUpdate(node *v1.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.node = node
	r.log("node-update %s", node.Name)
}

func (r *recordingSink) OnNodeDelete() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.node = nil
	r.log("node-delete")
}

func (r *recordingSink) OnSynced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.synced = true
	for k := range r.services {
		r.atSync = append(r.atSync, "service "+k.String())
	}
	for k := range r.slices {
		r.atSync = append(r.atSync, "slice "+k.String())
	}
	r.log("synced")
}

func (r *recordingSink) isSynced() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced
}

func (r *recordingSink) service(ns, name string) *v1.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.services[nsName(ns, name)]
}

func (r *recordingSink) slice(ns, name string) *discovery.EndpointSlice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slices[nsName(ns, name)]
}

func (r *recordingSink) currentNode() *v1.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.node
}

func (r *recordingSink) eventLog() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recordingSink) syncedWith() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.atSync...)
}

// teeSink hands every event to several sinks, so a test can watch the raw
// events and the real Tracker side by side.
type teeSink []servicemap.Sink

func (t teeSink) OnServiceUpdate(svc *v1.Service) {
	for _, s := range t {
		s.OnServiceUpdate(svc)
	}
}

func (t teeSink) OnServiceDelete(key types.NamespacedName) {
	for _, s := range t {
		s.OnServiceDelete(key)
	}
}

func (t teeSink) OnEndpointSliceUpdate(slice *discovery.EndpointSlice) {
	for _, s := range t {
		s.OnEndpointSliceUpdate(slice)
	}
}

func (t teeSink) OnEndpointSliceDelete(key types.NamespacedName) {
	for _, s := range t {
		s.OnEndpointSliceDelete(key)
	}
}

func (t teeSink) OnNodeUpdate(node *v1.Node) {
	for _, s := range t {
		s.OnNodeUpdate(node)
	}
}

func (t teeSink) OnNodeDelete() {
	for _, s := range t {
		s.OnNodeDelete()
	}
}

func (t teeSink) OnSynced() {
	for _, s := range t {
		s.OnSynced()
	}
}

// eventually polls cond every 20ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
