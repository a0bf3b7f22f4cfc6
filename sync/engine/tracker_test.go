package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"

	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/runner"
	"kproxy.dev/kproxy/sync/serve/healthz"
	"kproxy.dev/kproxy/sync/servicemap"
)

func service(name, clusterIP string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: "1"},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports: []v1.ServicePort{{
				Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
}

func endpointSlice(service, name string, addrs ...string) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, ResourceVersion: "1",
			Labels: map[string]string{discovery.LabelServiceName: service},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: new("http"), Protocol: new(v1.ProtocolTCP), Port: new(int32(8080))}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{a}, Conditions: discovery.EndpointConditions{Ready: new(true)}})
	}
	return s
}

// TestWithTracker drives the real Tracker and the real runner loop: events
// notify the engine, syncs are rate limited and retried on the wall clock.
func TestWithTracker(t *testing.T) {
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(logCtx, 30*time.Second) // deadlock guard
	defer cancel()

	m := metrics.New()
	health := healthz.New(time.Minute, m, nil)
	fm := &fakeMode{}
	var e *Engine
	tracker := servicemap.NewTracker("node-a", func() { e.Notify() })
	e, err := New(Config{Map: tracker, Mode: fm, Metrics: m, Health: health,
		MinSyncPeriod: -1, SyncPeriod: time.Hour, RetryInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(runCtx)
	}()
	defer func() {
		stop()
		<-done
	}()

	web := servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP}
	db := servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "db"}, Port: "http", Protocol: v1.ProtocolTCP}

	tracker.OnServiceUpdate(service("web", "198.18.0.10"))
	tracker.OnEndpointSliceUpdate(endpointSlice("web", "web-1", "198.19.1.1", "198.19.1.2"))
	if lastSynced(e) != nil {
		t.Fatal("synced before the map had its initial state")
	}
	tracker.OnSynced()

	// waitFor waits for successful syncs until one satisfies ok.
	waitFor := func(what string, ok func(*servicemap.Snapshot) bool) *servicemap.Snapshot {
		t.Helper()
		for {
			last := lastSynced(e)
			if last != nil && ok(last) {
				return last
			}
			var next uint64 = 1
			if last != nil {
				next = last.Generation + 1
			}
			if err := e.WaitForGeneration(ctx, next); err != nil {
				t.Fatalf("waiting until %s: %v", what, err)
			}
		}
	}
	has := func(name servicemap.ServicePortName, endpoints int) func(*servicemap.Snapshot) bool {
		return func(s *servicemap.Snapshot) bool {
			p, ok := s.Get(name)
			return ok && len(p.Endpoints) == endpoints
		}
	}

	waitFor("web is synced", has(web, 2))
	calls := fm.takeCalls()
	if len(calls) == 0 || !calls[0].Full || !slices.Contains(calls[0].Changed, web) {
		t.Fatalf("first mode sync = %+v, want a full sync listing %v", calls, web)
	}
	if got := testutil.ToFloat64(m.ServicePorts); got != 1 {
		t.Errorf("service ports gauge = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Endpoints); got != 2 {
		t.Errorf("endpoints gauge = %v, want 2", got)
	}

	// A partial sync that fails once is retried with its changes.
	fm.failNext(1)
	tracker.OnServiceUpdate(service("db", "198.18.0.11"))
	tracker.OnEndpointSliceUpdate(endpointSlice("db", "db-1", "198.19.2.1"))
	last := waitFor("db is synced", has(db, 1))
	calls = fm.takeCalls()
	if len(calls) < 2 || !calls[0].Failed {
		t.Fatalf("mode calls = %+v, want a failure then a retry", calls)
	}
	final := calls[len(calls)-1]
	if final.Failed || final.Full || !slices.Contains(final.Changed, db) || slices.Contains(final.Changed, web) {
		t.Errorf("retry sync = %+v, want a partial sync of %v only", final, db)
	}
	if last.Len() != 2 {
		t.Errorf("last synced snapshot has %d ports, want 2", last.Len())
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"sync failures", testutil.ToFloat64(m.SyncFailuresTotal), 1},
		{"service ports", testutil.ToFloat64(m.ServicePorts), 2},
		{"endpoints", testutil.ToFloat64(m.Endpoints), 3},
		{"service changes total", testutil.ToFloat64(m.ServiceChangesTotal), 2},
		{"endpoint changes total", testutil.ToFloat64(m.EndpointChangesTotal), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !health.Status().Healthy {
		t.Error("unhealthy after everything synced")
	}

	// The Node being deleted makes /healthz fail once synced.
	tracker.OnNodeUpdate(&v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "node-a", DeletionTimestamp: &metav1.Time{Time: time.Now()}, Finalizers: []string{"test"},
	}})
	waitFor("the node is seen deleting", func(s *servicemap.Snapshot) bool { return s.Node != nil && s.Node.Deleting })
	if health.NodeEligible() {
		t.Error("node still eligible while being deleted")
	}
}

// BenchmarkPartialSync measures one engine sync after a single EndpointSlice
// change among 1000 services: the steady-state cost the engine adds around
// the mode (snapshot, change set, metrics).
func BenchmarkPartialSync(b *testing.B) {
	m := metrics.New()
	tracker := servicemap.NewTracker("node-a", nil)
	e, err := New(Config{Map: tracker, Mode: &fakeMode{}, Metrics: m, Health: healthz.New(time.Minute, m, nil)})
	if err != nil {
		b.Fatal(err)
	}
	const services = 1000
	for i := range services {
		name := fmt.Sprintf("svc-%d", i)
		tracker.OnServiceUpdate(service(name, fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)))
		tracker.OnEndpointSliceUpdate(endpointSlice(name, name+"-1", fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)))
	}
	tracker.OnSynced()
	ctx := context.Background()
	if err := e.sync(ctx, runner.Requested); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		slice := endpointSlice("svc-7", "svc-7-1", fmt.Sprintf("198.19.100.%d", i%2+1))
		slice.ResourceVersion = fmt.Sprint(i + 2)
		tracker.OnEndpointSliceUpdate(slice)
		if err := e.sync(ctx, runner.Requested); err != nil {
			b.Fatal(err)
		}
	}
}
