// Package bench holds kproxy's end-to-end benchmarks; the network-namespace
// lab they run in is package bench/lab.
package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/clustersource"
	"kproxy.dev/kproxy/sync/engine"
	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/serve/healthz"
	"kproxy.dev/kproxy/sync/servicemap"
)

// watchingMode is a mode that programs nothing and tells a waiter when a
// sync finished whose snapshot holds a given service.
type watchingMode struct {
	mu      sync.Mutex
	synced  map[types.NamespacedName]time.Time
	changed chan struct{}
}

func newWatchingMode() *watchingMode {
	return &watchingMode{synced: map[types.NamespacedName]time.Time{}, changed: make(chan struct{}, 1)}
}

func (m *watchingMode) Name() mode.Name { return "bench" }
func (m *watchingMode) Close() error    { return nil }

func (m *watchingMode) Sync(_ context.Context, snap *servicemap.Snapshot, _ *servicemap.ChangeSet) error {
	now := time.Now()
	m.mu.Lock()
	for name := range snap.All() {
		if _, seen := m.synced[name.NamespacedName]; !seen {
			m.synced[name.NamespacedName] = now
		}
	}
	m.mu.Unlock()
	select {
	case m.changed <- struct{}{}:
	default:
	}
	return nil
}

// waitFor returns when a sync covering svc finished, and when.
func (m *watchingMode) waitFor(ctx context.Context, svc types.NamespacedName) (time.Time, error) {
	for {
		m.mu.Lock()
		at, ok := m.synced[svc]
		m.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-m.changed:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %s to be synced: %w", svc, ctx.Err())
		}
	}
}

func service(name, ip string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       v1.ServiceSpec{ClusterIP: ip, Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
	}
}

func endpointSlice(svc string, ip string) *discovery.EndpointSlice {
	name, port, proto := "http", int32(8080), v1.ProtocolTCP
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-1", Namespace: "default",
			Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
		Endpoints:   []discovery.Endpoint{{Addresses: []string{ip}}},
	}
}

// BenchmarkAPIChangeToSync measures, against a real kube-apiserver and etcd,
// the time from creating a Service through the API until the mode's sync that
// includes it has finished: informer watch, service map, sync runner and the
// mode call. The mode itself programs nothing, so this is kproxy's own share of
// network programming latency; the sync runner has no minimum interval here
// (--iptables-min-sync-period adds up to its value on top). 200 other
// services with endpoints are in the map throughout.
func BenchmarkAPIChangeToSync(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	api := lab.StartAPIServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	bulk := rest.CopyConfig(api.Config)
	bulk.QPS, bulk.Burst = 1000, 1000
	client := kubernetes.NewForConfigOrDie(bulk)
	const background = 200
	for i := range background {
		name := fmt.Sprintf("bg-%d", i)
		create(ctx, b, client, service(name, fmt.Sprintf("198.18.1.%d", i+1)), endpointSlice(name, fmt.Sprintf("198.19.1.%d", i+1)))
	}

	m := metrics.New()
	wm := newWatchingMode()
	var eng *engine.Engine
	tracker := servicemap.NewTracker("node-a", func() { eng.Notify() })
	eng, err := engine.New(engine.Config{Map: tracker, Mode: wm, Metrics: m,
		Health: healthz.New(time.Minute, m, nil), MinSyncPeriod: -1, SyncPeriod: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	// The source talks to the API server as kproxy would: protobuf, qps 5.
	cfg := rest.CopyConfig(api.Config)
	clustersource.ApplyClientConnection(cfg, clustersource.DefaultClientConnection())
	src := clustersource.New(kubernetes.NewForConfigOrDie(cfg), "node-a", 0, tracker)
	go func() { _ = src.Run(ctx) }()
	go eng.Run(ctx)
	if _, err := wm.waitFor(ctx, types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("bg-%d", background-1)}); err != nil {
		b.Fatal(err)
	}

	var latencies []time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("svc-%d-%d", b.N, i)
		ip := fmt.Sprintf("198.18.%d.%d", 2+i/250, 1+i%250)
		start := time.Now()
		create(ctx, b, client, service(name, ip), endpointSlice(name, "198.19.2.1"))
		waitCtx, cancelWait := context.WithTimeout(ctx, 30*time.Second)
		done, err := wm.waitFor(waitCtx, types.NamespacedName{Namespace: "default", Name: name})
		cancelWait()
		if err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, done.Sub(start))
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(latencies[len(latencies)*9/10].Microseconds())/1000, "p90-ms")
}

func create(ctx context.Context, b *testing.B, client kubernetes.Interface, svc *v1.Service, slice *discovery.EndpointSlice) {
	b.Helper()
	if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating service %s: %v", svc.Name, err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating endpoint slice %s: %v", slice.Name, err)
	}
}
