package clustersource

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/servicemap"
)

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
