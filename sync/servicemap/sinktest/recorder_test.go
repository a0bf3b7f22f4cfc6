package sinktest

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func service(ns, name, clusterIP string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.ServiceSpec{ClusterIP: clusterIP, Ports: []v1.ServicePort{{Port: 80}}},
	}
}

func endpointSlice(ns, name, addr string) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{addr}}},
	}
}

func node(name string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func key(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// names lists a State's contents as "Kind ns/name", for comparing states.
func names(s State) []string {
	var out []string
	for k := range s.Services {
		out = append(out, "Service "+k.String())
	}
	for k := range s.Slices {
		out = append(out, "EndpointSlice "+k.String())
	}
	if s.Node != nil {
		out = append(out, "Node "+s.Node.Name)
	}
	return out
}

func TestRecorder(t *testing.T) {
	tests := []struct {
		name          string
		calls         func(r *Recorder)
		wantEvents    []string
		wantState     []string
		wantSynced    int
		wantAtSync    []string
		wantWebIP     string // ClusterIP of shop/web, "" if absent
		wantSliceAddr string // first address of shop/web-1, "" if absent
	}{{
		name:       "nothing",
		calls:      func(*Recorder) {},
		wantEvents: nil,
	}, {
		name: "updates then sync",
		calls: func(r *Recorder) {
			r.OnNodeUpdate(node("node-a"))
			r.OnServiceUpdate(service("shop", "web", "198.18.0.10"))
			r.OnEndpointSliceUpdate(endpointSlice("shop", "web-1", "198.19.1.1"))
			r.OnSynced()
		},
		wantEvents: []string{
			"update Node node-a", "update Service shop/web", "update EndpointSlice shop/web-1", "synced",
		},
		wantState:     []string{"Service shop/web", "EndpointSlice shop/web-1", "Node node-a"},
		wantSynced:    1,
		wantAtSync:    []string{"EndpointSlice shop/web-1", "Service shop/web"},
		wantWebIP:     "198.18.0.10",
		wantSliceAddr: "198.19.1.1",
	}, {
		name: "a later update replaces the object",
		calls: func(r *Recorder) {
			r.OnServiceUpdate(service("shop", "web", "198.18.0.10"))
			r.OnServiceUpdate(service("shop", "web", "198.18.0.11"))
			r.OnEndpointSliceUpdate(endpointSlice("shop", "web-1", "198.19.1.1"))
			r.OnEndpointSliceUpdate(endpointSlice("shop", "web-1", "198.19.1.2"))
		},
		wantEvents: []string{
			"update Service shop/web", "update Service shop/web",
			"update EndpointSlice shop/web-1", "update EndpointSlice shop/web-1",
		},
		wantState:     []string{"Service shop/web", "EndpointSlice shop/web-1"},
		wantWebIP:     "198.18.0.11",
		wantSliceAddr: "198.19.1.2",
	}, {
		name: "deletes forget, including unknown keys",
		calls: func(r *Recorder) {
			r.OnServiceUpdate(service("shop", "web", "198.18.0.10"))
			r.OnServiceUpdate(service("shop", "db", "198.18.0.12"))
			r.OnEndpointSliceUpdate(endpointSlice("shop", "web-1", "198.19.1.1"))
			r.OnNodeUpdate(node("node-a"))
			r.OnServiceDelete(key("shop", "web"))
			r.OnEndpointSliceDelete(key("shop", "web-1"))
			r.OnEndpointSliceDelete(key("shop", "never"))
			r.OnNodeDelete()
		},
		wantEvents: []string{
			"update Service shop/web", "update Service shop/db", "update EndpointSlice shop/web-1",
			"update Node node-a", "delete Service shop/web", "delete EndpointSlice shop/web-1",
			"delete EndpointSlice shop/never", "delete Node",
		},
		wantState: []string{"Service shop/db"},
	}, {
		name: "PresentAtSync is taken at the last OnSynced",
		calls: func(r *Recorder) {
			r.OnServiceUpdate(service("shop", "web", "198.18.0.10"))
			r.OnSynced()
			r.OnServiceDelete(key("shop", "web"))
			r.OnServiceUpdate(service("shop", "db", "198.18.0.12"))
			r.OnSynced()
			r.OnServiceUpdate(service("shop", "late", "198.18.0.13"))
		},
		wantEvents: []string{
			"update Service shop/web", "synced", "delete Service shop/web",
			"update Service shop/db", "synced", "update Service shop/late",
		},
		wantState:  []string{"Service shop/db", "Service shop/late"},
		wantSynced: 2,
		wantAtSync: []string{"Service shop/db"},
	}, {
		name: "nil objects are logged, not kept",
		calls: func(r *Recorder) {
			r.OnServiceUpdate(nil)
			r.OnEndpointSliceUpdate(nil)
			r.OnNodeUpdate(nil)
		},
		wantEvents: []string{"update Service <nil>", "update EndpointSlice <nil>", "update Node <nil>"},
	}}
	sortStrings := cmpopts.SortSlices(func(a, b string) bool { return a < b })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := New()
			tc.calls(r)
			if diff := cmp.Diff(tc.wantEvents, r.Events()); diff != "" {
				t.Errorf("Events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantState, names(r.State()), sortStrings); diff != "" {
				t.Errorf("State (-want +got):\n%s", diff)
			}
			if got := r.SyncedCount(); got != tc.wantSynced {
				t.Errorf("SyncedCount = %d, want %d", got, tc.wantSynced)
			}
			if got := r.Synced(); got != (tc.wantSynced > 0) {
				t.Errorf("Synced = %v, want %v", got, tc.wantSynced > 0)
			}
			if diff := cmp.Diff(tc.wantAtSync, r.PresentAtSync()); diff != "" {
				t.Errorf("PresentAtSync (-want +got):\n%s", diff)
			}
			gotIP := ""
			if s := r.Service("shop", "web"); s != nil {
				gotIP = s.Spec.ClusterIP
			}
			if gotIP != tc.wantWebIP {
				t.Errorf("Service(shop, web) cluster IP %q, want %q", gotIP, tc.wantWebIP)
			}
			gotAddr := ""
			if s := r.Slice("shop", "web-1"); s != nil {
				gotAddr = s.Endpoints[0].Addresses[0]
			}
			if gotAddr != tc.wantSliceAddr {
				t.Errorf("Slice(shop, web-1) address %q, want %q", gotAddr, tc.wantSliceAddr)
			}
			st := r.State()
			if (r.Node() == nil) != (st.Node == nil) {
				t.Errorf("Node() = %v disagrees with State().Node = %v", r.Node(), st.Node)
			}
		})
	}
}

func TestTakeClearsTheLog(t *testing.T) {
	r := New()
	r.OnServiceUpdate(service("shop", "web", "198.18.0.10"))
	r.OnSynced()
	if diff := cmp.Diff([]string{"update Service shop/web", "synced"}, r.Take()); diff != "" {
		t.Errorf("first Take (-want +got):\n%s", diff)
	}
	if got := r.Events(); got != nil {
		t.Errorf("Events after Take = %v, want none", got)
	}
	r.OnServiceDelete(key("shop", "web"))
	if diff := cmp.Diff([]string{"delete Service shop/web"}, r.Take()); diff != "" {
		t.Errorf("second Take (-want +got):\n%s", diff)
	}
	// Take clears the log, not the state or the sync record.
	if r.SyncedCount() != 1 || !cmp.Equal(r.PresentAtSync(), []string{"Service shop/web"}) {
		t.Errorf("Take changed the sync record: count %d, present %v", r.SyncedCount(), r.PresentAtSync())
	}
}

// TestCopiesAreIndependent checks that what the accessors return cannot
// change the Recorder, nor be changed by later calls.
func TestCopiesAreIndependent(t *testing.T) {
	r := New()
	r.OnServiceUpdate(service("shop", "web", "198.18.0.10"))
	r.OnSynced()
	events, atSync, st := r.Events(), r.PresentAtSync(), r.State()
	events[0], atSync[0] = "scribbled", "scribbled"
	delete(st.Services, key("shop", "web"))
	r.OnServiceUpdate(service("shop", "db", "198.18.0.12"))

	if diff := cmp.Diff([]string{"update Service shop/web", "synced", "update Service shop/db"}, r.Events()); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Service shop/web"}, r.PresentAtSync()); diff != "" {
		t.Errorf("PresentAtSync (-want +got):\n%s", diff)
	}
	if r.Service("shop", "web") == nil {
		t.Error("deleting from a State removed the Service from the Recorder")
	}
	if len(st.Services) != 0 {
		t.Errorf("earlier State grew with a later update: %v", names(st))
	}
}

// TestConcurrentUse runs calls and reads from several goroutines; run with
// -race it catches unguarded state.
func TestConcurrentUse(t *testing.T) {
	r := New()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				svc := service("shop", "web", "198.18.0.10")
				svc.Name = svc.Name + string(rune('a'+i))
				r.OnServiceUpdate(svc)
				_ = r.State()
				_ = r.Events()
				if j%10 == 0 {
					r.OnSynced()
					_ = r.PresentAtSync()
				}
			}
		})
	}
	wg.Wait()
	if got := len(r.Events()); got != 4*50+4*5 {
		t.Errorf("%d events, want %d", got, 4*50+4*5)
	}
	if got := r.SyncedCount(); got != 4*5 {
		t.Errorf("SyncedCount = %d, want %d", got, 4*5)
	}
	if got := len(r.State().Services); got != 4 {
		t.Errorf("%d services, want 4", got)
	}
}
