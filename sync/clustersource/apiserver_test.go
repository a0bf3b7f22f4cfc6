package clustersource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/servicemap"
	"kproxy.dev/kproxy/sync/servicemap/sinktest"
)

// catchUp bounds how long the map may lag the API server; it covers the
// informers' reconnect back-off after an outage.
const catchUp = 45 * time.Second

// cuttableTransport fails every request while cut is set and counts failed
// requests, so a test can hold the source offline while it changes the
// cluster through another client, and can see the source retrying.
type cuttableTransport struct {
	next     http.RoundTripper
	cut      atomic.Bool
	failures atomic.Int64
}

func (c *cuttableTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		c.failures.Add(1)
		return nil, errors.New("connection cut by test")
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		c.failures.Add(1)
	}
	return resp, err
}

func httpPort(name string) servicemap.ServicePortName {
	return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: "http", Protocol: v1.ProtocolTCP}
}

// endpointsOf lists a snapshot's endpoints of name as "ip:port", or nil if
// the service port is absent.
func endpointsOf(snap *servicemap.Snapshot, name string) []string {
	sp, ok := snap.Get(httpPort(name))
	if !ok {
		return nil
	}
	eps := []string{}
	for _, e := range sp.Endpoints {
		eps = append(eps, e.String())
	}
	return eps
}

// snapshotHas polls the tracker until name has exactly the endpoints want
// (nil: the service port is gone).
func snapshotHas(t *testing.T, tracker *servicemap.Tracker, name string, want ...string) {
	t.Helper()
	var got []string
	eventually(t, catchUp, fmt.Sprintf("%s with endpoints %v in the snapshot", name, want), func() bool {
		snap, _ := tracker.Snapshot()
		got = endpointsOf(snap, name)
		if want == nil {
			return got == nil
		}
		return slices.Equal(got, want)
	})
}

func TestAgainstAPIServer(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	api := lab.StartAPIServer(t)
	admin := api.Client
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	mustCreateNamespace(ctx, t, admin, ns)
	before := mustCreateService(ctx, t, admin, service(ns, "before", "", nil))
	mustCreateSlice(ctx, t, admin, endpointSlice(ns, "before-1", "before", nil, "198.19.1.1"))
	mustCreateService(ctx, t, admin, service(ns, "mesh", "", proxyNameLabel))
	mustCreateSlice(ctx, t, admin, endpointSlice(ns, "mesh-1", "mesh", proxyNameLabel, "198.19.1.9"))
	mustCreateService(ctx, t, admin, service(ns, "db", v1.ClusterIPNone, nil))
	mustCreateSlice(ctx, t, admin, endpointSlice(ns, "db-1", "db", headlessLabel, "198.19.1.8"))
	lab.CreateNode(t, admin, testNode, "198.19.0.1")
	lab.CreateNode(t, admin, "node-b", "198.19.0.2")

	// The source gets its own client, built the way kproxy builds it:
	// kubeconfig file, kube-proxy's connection defaults (protobuf).
	cfg, err := RESTConfig(api.KubeconfigPath, "")
	if err != nil {
		t.Fatal(err)
	}
	ApplyClientConnection(cfg, DefaultClientConnection())
	cut := &cuttableTransport{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { cut.next = rt; return cut }
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	rec := sinktest.New()
	tracker := servicemap.NewTracker(testNode, nil)
	srcCtx, stopSource := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- New(client, testNode, DefaultResync, teeSink{rec, tracker}).Run(srcCtx) }()
	defer func() {
		stopSource()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	eventually(t, catchUp, "OnSynced", func() bool { return rec.Synced() && tracker.Synced() })
	// A service that existed before the source started is in the very first
	// snapshot after OnSynced, with its endpoints.
	first, changes := tracker.Snapshot()
	if !changes.Full {
		t.Error("first snapshot's change set is not Full")
	}
	sp, ok := first.Get(httpPort("before"))
	if !ok {
		t.Fatalf("service before missing from the first snapshot; events: %v", rec.Events())
	}
	if want := netip.MustParseAddr(before.Spec.ClusterIP); len(sp.ClusterIPs) != 1 || sp.ClusterIPs[0] != want {
		t.Errorf("before cluster IPs = %v, want [%v]", sp.ClusterIPs, want)
	}
	if got := endpointsOf(first, "before"); !slices.Equal(got, []string{"198.19.1.1:8080"}) {
		t.Errorf("before endpoints in the first snapshot = %v, want [198.19.1.1:8080]", got)
	}
	for _, name := range []string{"mesh", "db"} {
		if _, ok := first.Get(httpPort(name)); ok {
			t.Errorf("filtered service %s is in the snapshot", name)
		}
	}
	eventually(t, catchUp, "this node in the snapshot", func() bool {
		snap, _ := tracker.Snapshot()
		return snap.Node != nil && slices.Equal(snap.Node.Addresses, []netip.Addr{netip.MustParseAddr("198.19.0.1")})
	})

	// Live changes. The labelled service is created first: once "after"
	// has arrived, anything created before it would have too.
	mustCreateService(ctx, t, admin, service(ns, "mesh-late", "", proxyNameLabel))
	mustCreateService(ctx, t, admin, service(ns, "after", "", nil))
	mustCreateSlice(ctx, t, admin, endpointSlice(ns, "after-1", "after", nil, "198.19.2.1"))
	mustUpdateSlice(ctx, t, admin, endpointSlice(ns, "before-1", "before", nil, "198.19.1.1", "198.19.1.2"))
	snapshotHas(t, tracker, "after", "198.19.2.1:8080")
	snapshotHas(t, tracker, "before", "198.19.1.1:8080", "198.19.1.2:8080")
	for _, e := range rec.Events() {
		if strings.Contains(e, "mesh") || strings.Contains(e, "db") || strings.Contains(e, "node-b") {
			t.Errorf("filtered object reached the sink: %q", e)
		}
	}

	// Outage: the source is cut off and the API server stops. Nothing may
	// be deleted from the map while the source cannot see the cluster.
	eventsBefore := len(rec.Events())
	cut.cut.Store(true)
	api.Stop()
	failures := cut.failures.Load()
	eventually(t, catchUp, "the source retrying during the outage", func() bool {
		return cut.failures.Load() >= failures+3
	})
	api.Start()
	// Changes made while the source is still cut off must arrive after it
	// reconnects, whether by resumed watch or by relist.
	if err := admin.CoreV1().Services(ns).Delete(ctx, "after", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "after-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mustUpdateSlice(ctx, t, admin, endpointSlice(ns, "before-1", "before", nil, "198.19.1.3"))
	mustCreateService(ctx, t, admin, service(ns, "during", "", nil))
	mustCreateSlice(ctx, t, admin, endpointSlice(ns, "during-1", "during", nil, "198.19.3.1"))

	outage := rec.Events()[eventsBefore:]
	for _, e := range outage {
		if strings.Contains(e, "delete") {
			t.Errorf("delete event during the outage: %q (all: %v)", e, outage)
		}
	}
	snap, _ := tracker.Snapshot()
	if got := endpointsOf(snap, "after"); !slices.Equal(got, []string{"198.19.2.1:8080"}) {
		t.Errorf("after lost during the outage: endpoints %v", got)
	}
	if got := endpointsOf(snap, "before"); !slices.Equal(got, []string{"198.19.1.1:8080", "198.19.1.2:8080"}) {
		t.Errorf("before changed during the outage: endpoints %v", got)
	}

	cut.cut.Store(false)
	snapshotHas(t, tracker, "during", "198.19.3.1:8080")
	snapshotHas(t, tracker, "after")
	snapshotHas(t, tracker, "before", "198.19.1.3:8080")

	// And the watch is live again.
	mustUpdateSlice(ctx, t, admin, endpointSlice(ns, "during-1", "during", nil, "198.19.3.1", "198.19.3.2"))
	snapshotHas(t, tracker, "during", "198.19.3.1:8080", "198.19.3.2:8080")
}

func mustCreateNamespace(ctx context.Context, t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

func mustCreateService(ctx context.Context, t *testing.T, c kubernetes.Interface, svc *v1.Service) *v1.Service {
	t.Helper()
	got, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
	return got
}

func mustCreateSlice(ctx context.Context, t *testing.T, c kubernetes.Interface, s *discovery.EndpointSlice) {
	t.Helper()
	if _, err := c.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating endpointslice %s/%s: %v", s.Namespace, s.Name, err)
	}
}

// mustUpdateSlice replaces a slice's content, keeping its resourceVersion.
func mustUpdateSlice(ctx context.Context, t *testing.T, c kubernetes.Interface, s *discovery.EndpointSlice) {
	t.Helper()
	cur, err := c.DiscoveryV1().EndpointSlices(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting endpointslice %s/%s: %v", s.Namespace, s.Name, err)
	}
	s.ResourceVersion = cur.ResourceVersion
	if _, err := c.DiscoveryV1().EndpointSlices(s.Namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating endpointslice %s/%s: %v", s.Namespace, s.Name, err)
	}
}
