package clustersource

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/servicemap/sinktest"
)

const (
	testNode = "node-a"
	ns       = "shop"
	wait     = 10 * time.Second
)

var (
	proxyNameLabel = map[string]string{LabelServiceProxyName: "other-proxy"}
	headlessLabel  = map[string]string{v1.IsHeadlessService: ""}
)

// startSource runs a Source on client until the test ends and returns its
// sink once the Source has synced: Run returns nil when cancelled after
// that, and an error before (which the cleanup would report).
func startSource(t *testing.T, client *fake.Clientset) *sinktest.Recorder {
	t.Helper()
	sink := sinktest.New()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(client, testNode, DefaultResync, sink).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after cancel after sync: %v", err)
		}
	})
	eventually(t, wait, "OnSynced", sink.Synced)
	return sink
}

func TestInitialStateAndFiltering(t *testing.T) {
	client := fake.NewClientset(
		service(ns, "web", "198.18.0.10", nil),
		service(ns, "mesh", "198.18.0.11", proxyNameLabel),
		endpointSlice(ns, "web-abc", "web", nil, "198.19.1.1"),
		endpointSlice(ns, "mesh-abc", "mesh", proxyNameLabel, "198.19.1.2"),
		endpointSlice(ns, "db-abc", "db", headlessLabel, "198.19.1.3"),
		node(testNode, "198.19.0.1"),
		node("node-b", "198.19.0.2"),
	)
	sink := startSource(t, client)
	eventually(t, wait, "this node", func() bool { return sink.Node() != nil })

	got := sink.PresentAtSync()
	sort.Strings(got)
	want := []string{"EndpointSlice shop/web-abc", "Service shop/web"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects in the sink at OnSynced (-want +got):\n%s", diff)
	}
	if n := sink.Node(); n.Name != testNode {
		t.Errorf("node = %s, want %s", n.Name, testNode)
	}
	for _, e := range sink.Events() {
		if e == "update Node node-b" {
			t.Errorf("another node's Node reached the sink: %v", sink.Events())
		}
	}
}

// The fake clientset ignores field selectors and filters only lists by
// label, so check that the requests carry the selectors a real API server
// filters on (the integration test checks the server side).
func TestListWatchSelectors(t *testing.T) {
	client := fake.NewClientset()
	startSource(t, client)

	want := map[string]struct{ label, field string }{
		"services":       {"!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name", "spec.clusterIP!=None"},
		"endpointslices": {"!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name", ""},
		"nodes":          {"", "metadata.name=" + testNode},
		"servicecidrs":   {"", ""},
	}
	seen := map[string]bool{}
	for _, a := range client.Actions() {
		var label, field string
		switch a := a.(type) {
		case k8stesting.ListAction:
			r := a.GetListRestrictions()
			label, field = r.Labels.String(), r.Fields.String()
		case k8stesting.WatchAction:
			r := a.GetWatchRestrictions()
			label, field = r.Labels.String(), r.Fields.String()
		default:
			continue
		}
		res := a.GetResource().Resource
		w, ok := want[res]
		if !ok {
			t.Errorf("unexpected %s of %s", a.GetVerb(), res)
			continue
		}
		seen[res] = true
		if label != w.label || field != w.field {
			t.Errorf("%s %s: labels %q fields %q, want labels %q fields %q", a.GetVerb(), res, label, field, w.label, w.field)
		}
	}
	for res := range want {
		if !seen[res] {
			t.Errorf("no list or watch of %s", res)
		}
	}
}

func TestEventsAfterSync(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		service(ns, "web", "198.18.0.10", nil),
		endpointSlice(ns, "web-abc", "web", nil, "198.19.1.1"),
		node(testNode, "198.19.0.1"),
	)
	sink := startSource(t, client)
	eventually(t, wait, "this node", func() bool { return sink.Node() != nil })

	updated := service(ns, "web", "198.18.0.10", nil)
	updated.Spec.Ports[0].Port = 8081
	if _, err := client.CoreV1().Services(ns).Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "updated service", func() bool {
		s := sink.Service(ns, "web")
		return s != nil && s.Spec.Ports[0].Port == 8081
	})

	if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx,
		endpointSlice(ns, "web-def", "web", nil, "198.19.1.5"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "new slice", func() bool { return sink.Slice(ns, "web-def") != nil })

	if err := client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "slice delete", func() bool { return sink.Slice(ns, "web-abc") == nil })

	if err := client.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "service delete", func() bool { return sink.Service(ns, "web") == nil })

	n := node(testNode, "198.19.0.1")
	n.Labels["topology.kubernetes.io/zone"] = "z1"
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "node update", func() bool {
		n := sink.Node()
		return n != nil && n.Labels["topology.kubernetes.io/zone"] == "z1"
	})
	if err := client.CoreV1().Nodes().Delete(ctx, testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "node delete", func() bool { return sink.Node() == nil })

	log := sink.Events()
	for _, e := range []string{"delete EndpointSlice shop/web-abc", "delete Service shop/web", "delete Node"} {
		if !contains(log, e) {
			t.Errorf("event %q missing from %v", e, log)
		}
	}
}

// blockList makes list calls of resource wait until release is closed, and
// reports each call on listed. A fake clientset runs its reactors under one
// lock, so a blocked list stalls every other call to the same clientset: give
// the blocked resource its own clientset (see splitClient).
func blockList(client *fake.Clientset, resource string, listed chan<- struct{}, release <-chan struct{}) {
	client.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case listed <- struct{}{}:
		default:
		}
		<-release
		return false, nil, nil // fall through to the object tracker
	})
}

// splitClient serves EndpointSlices and Nodes from their own fake clientsets,
// so that blocking one resource's list leaves the others running.
type splitClient struct {
	*fake.Clientset
	slices, nodes *fake.Clientset
}

func (c splitClient) DiscoveryV1() discoveryv1client.DiscoveryV1Interface {
	return c.slices.DiscoveryV1()
}

func (c splitClient) CoreV1() corev1client.CoreV1Interface {
	return splitCoreV1{CoreV1Interface: c.Clientset.CoreV1(), nodes: c.nodes.CoreV1()}
}

type splitCoreV1 struct {
	corev1client.CoreV1Interface
	nodes corev1client.CoreV1Interface
}

func (c splitCoreV1) Nodes() corev1client.NodeInterface { return c.nodes.Nodes() }

// startSplitSource is startSource on a splitClient.
func startSplitSource(t *testing.T, client splitClient) *sinktest.Recorder {
	t.Helper()
	sink := sinktest.New()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(client, testNode, DefaultResync, sink).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return sink
}

func TestNoSyncBeforeEndpointSlices(t *testing.T) {
	client := splitClient{
		Clientset: fake.NewClientset(service(ns, "web", "198.18.0.10", nil)),
		slices:    fake.NewClientset(endpointSlice(ns, "web-abc", "web", nil, "198.19.1.1")),
		nodes:     fake.NewClientset(),
	}
	listed, release := make(chan struct{}, 1), make(chan struct{})
	blockList(client.slices, "endpointslices", listed, release)
	sink := startSplitSource(t, client)

	select {
	case <-listed:
	case <-time.After(wait):
		t.Fatal("EndpointSlices were never listed")
	}
	// Services are not held back, so once they arrive the only thing
	// keeping OnSynced away is the blocked slice list.
	eventually(t, wait, "service", func() bool { return sink.Service(ns, "web") != nil })
	if sink.Synced() {
		t.Fatal("OnSynced before the EndpointSlice cache synced")
	}
	close(release)
	eventually(t, wait, "OnSynced", sink.Synced)
	if got := sink.PresentAtSync(); !contains(got, "EndpointSlice shop/web-abc") {
		t.Errorf("slice not delivered before OnSynced: %v", got)
	}
}

func TestSyncDoesNotWaitForNode(t *testing.T) {
	client := splitClient{
		Clientset: fake.NewClientset(service(ns, "web", "198.18.0.10", nil)),
		slices:    fake.NewClientset(),
		nodes:     fake.NewClientset(node(testNode, "198.19.0.1")),
	}
	listed, release := make(chan struct{}, 1), make(chan struct{})
	blockList(client.nodes, "nodes", listed, release)
	sink := startSplitSource(t, client)
	// Registered after startSplitSource, so it runs first: Run's shutdown
	// waits for the blocked list.
	t.Cleanup(func() { close(release) })

	select {
	case <-listed:
	case <-time.After(wait):
		t.Fatal("Nodes were never listed")
	}
	eventually(t, wait, "OnSynced with the Node list blocked", sink.Synced)
	if !contains(sink.PresentAtSync(), "Service shop/web") {
		t.Errorf("service not delivered before OnSynced: %v", sink.PresentAtSync())
	}
	if sink.Node() != nil {
		t.Error("node delivered although its list is blocked")
	}
}

func TestRunFailsWhenCachesNeverSync(t *testing.T) {
	client := fake.NewClientset()
	release := make(chan struct{})
	blockList(client, "services", make(chan struct{}, 1), release)

	sink := sinktest.New()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 200*time.Millisecond, errors.New("test deadline"))
	defer cancel()
	src := New(client, testNode, DefaultResync, sink)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	<-ctx.Done()
	// Shutdown waits for the blocked list, so unblock it before waiting on Run.
	close(release)
	err := <-done
	if err == nil {
		t.Fatal("Run returned nil although the caches never synced")
	}
	if sink.Synced() {
		t.Error("OnSynced called although the caches never synced")
	}
	if err := src.Run(context.Background()); err == nil {
		t.Error("second Run did not fail")
	}
}

func TestHandlersTombstones(t *testing.T) {
	svc := service(ns, "web", "198.18.0.10", nil)
	slice := endpointSlice(ns, "web-abc", "web", nil, "198.19.1.1")
	tests := []struct {
		name string
		call func(h handlers)
		want []string
	}{
		{"service object", func(h handlers) { h.serviceDelete(svc) }, []string{"delete Service shop/web"}},
		{"service tombstone with object", func(h handlers) {
			h.serviceDelete(cache.DeletedFinalStateUnknown{Key: "shop/web", Obj: svc})
		}, []string{"delete Service shop/web"}},
		{"service tombstone with only a key", func(h handlers) {
			h.serviceDelete(cache.DeletedFinalStateUnknown{Key: "shop/gone"})
		}, []string{"delete Service shop/gone"}},
		{"service tombstone with a bad key", func(h handlers) {
			h.serviceDelete(cache.DeletedFinalStateUnknown{Key: "a/b/c"})
		}, nil},
		{"service delete of wrong type", func(h handlers) { h.serviceDelete(slice) }, nil},
		{"service update of wrong type", func(h handlers) { h.serviceUpdate("junk") }, nil},
		{"slice object", func(h handlers) { h.sliceDelete(slice) }, []string{"delete EndpointSlice shop/web-abc"}},
		{"slice tombstone", func(h handlers) {
			h.sliceDelete(cache.DeletedFinalStateUnknown{Key: "shop/web-abc", Obj: slice})
		}, []string{"delete EndpointSlice shop/web-abc"}},
		{"slice tombstone holding a service", func(h handlers) {
			h.sliceDelete(cache.DeletedFinalStateUnknown{Key: "shop/web-xyz", Obj: svc})
		}, []string{"delete EndpointSlice shop/web-xyz"}},
		{"slice update of wrong type", func(h handlers) { h.sliceUpdate(svc) }, nil},
		{"slice delete of nil", func(h handlers) { h.sliceDelete(nil) }, nil},
		{"node tombstone", func(h handlers) {
			h.nodeDelete(cache.DeletedFinalStateUnknown{Key: testNode, Obj: node(testNode)})
		}, []string{"delete Node"}},
		{"node tombstone with only a key", func(h handlers) {
			h.nodeDelete(cache.DeletedFinalStateUnknown{Key: testNode})
		}, []string{"delete Node"}},
		{"other node's delete", func(h handlers) { h.nodeDelete(node("node-b")) }, nil},
		{"other node's update", func(h handlers) { h.nodeUpdate(node("node-b")) }, nil},
		{"node update", func(h handlers) { h.nodeUpdate(node(testNode)) }, []string{"update Node node-a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink := sinktest.New()
			tc.call(handlers{sink: sink, nodeName: testNode, logger: klog.Background()})
			if diff := cmp.Diff(tc.want, sink.Events()); diff != "" {
				t.Errorf("sink events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeletedKey(t *testing.T) {
	got, ok := deletedKey[*discovery.EndpointSlice](cache.DeletedFinalStateUnknown{Key: "shop/s1", Obj: "not an object"})
	if want := (types.NamespacedName{Namespace: "shop", Name: "s1"}); !ok || got != want {
		t.Errorf("deletedKey = %v, %v; want %v, true", got, ok, want)
	}
	if _, ok := deletedKey[*v1.Service](cache.DeletedFinalStateUnknown{Key: ""}); ok {
		t.Error("empty tombstone key accepted")
	}
}

// TestServiceCIDRs: ServiceCIDR objects reach a sink that takes them, as
// kube-proxy's ServiceCIDR config hands them to its proxier; with the watch
// off (the MultiCIDRServiceAllocator gate) no ServiceCIDR is listed at all.
func TestServiceCIDRs(t *testing.T) {
	serviceCIDR := func(name string, cidrs ...string) *networking.ServiceCIDR {
		return &networking.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networking.ServiceCIDRSpec{CIDRs: cidrs}}
	}
	ctx := context.Background()
	client := fake.NewClientset(serviceCIDR("kubernetes", "198.18.0.0/16", "fd00:18::/108"))
	sink := startSource(t, client)
	holds := func(want map[string][]string) func() bool {
		return func() bool { return cmp.Equal(sink.ServiceCIDRs(), want, cmpopts.EquateEmpty()) }
	}
	eventually(t, wait, "the initial object", holds(map[string][]string{"kubernetes": {"198.18.0.0/16", "fd00:18::/108"}}))
	if _, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, serviceCIDR("extra", "198.18.64.0/18"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "a new object", holds(map[string][]string{"kubernetes": {"198.18.0.0/16", "fd00:18::/108"}, "extra": {"198.18.64.0/18"}}))
	if err := client.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "a deleted object", holds(map[string][]string{"extra": {"198.18.64.0/18"}}))

	offClient := fake.NewClientset(serviceCIDR("kubernetes", "198.18.0.0/16"))
	off := sinktest.New()
	src := New(offClient, testNode, DefaultResync, off)
	src.WatchServiceCIDRs = false
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	eventually(t, wait, "OnSynced", off.Synced)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, a := range offClient.Actions() {
		if a.GetResource().Resource == "servicecidrs" {
			t.Errorf("with the watch off: %s of servicecidrs", a.GetVerb())
		}
	}
}

// TestNodeWait: with NodeWait set (--nodeport-addresses=primary), the first
// sync waits for this node's Node object with an address, and only as long
// as NodeWait when it never comes.
func TestNodeWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nodeWait time.Duration
		addNode  bool
		held     bool // OnSynced is held back before the Node is added
	}{
		{"the Node arrives later", wait, true, true},
		{"no wait asked", 0, true, false},
		{"the Node never arrives", 300 * time.Millisecond, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(service(ns, "web", "198.18.0.10", nil), node(testNode)) // no address yet
			sink := sinktest.New()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			src := New(client, testNode, DefaultResync, sink)
			src.NodeWait = tc.nodeWait
			go func() { done <- src.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				<-done
			})
			eventually(t, wait, "the address-less Node", func() bool { return sink.Node() != nil })
			if tc.held {
				time.Sleep(200 * time.Millisecond)
				if sink.Synced() {
					t.Fatal("OnSynced before the Node had an address")
				}
			}
			if tc.addNode {
				if _, err := client.CoreV1().Nodes().Update(ctx, node(testNode, "198.19.0.1"), metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, wait, "OnSynced", sink.Synced)
			if tc.held && len(sink.Node().Status.Addresses) == 0 {
				t.Error("OnSynced came before the Node's address")
			}
		})
	}
}
