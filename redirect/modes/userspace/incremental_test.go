package userspace

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/localroute/fakeroutes"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestPartialSyncsMatchAFullOne: a sync that looks only at the changed
// service ports leaves the relays, their routes, the program's targets and
// the service addresses exactly as a sync of everything would, through
// random adds, removals, endpoint and address changes, periodic syncs, and
// an external IP that is another service's cluster IP (two relays wanting
// one address and port).
func TestPartialSyncsMatchAFullOne(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	nodeIP := netip.MustParseAddr("198.19.0.1")
	routes := fakeroutes.New(nodeIP)
	m, err := New(context.Background(), Config{
		Features: kernel.Features{SKLookup: kernel.Support{Present: true}}, Portals: contract.PortalsSKLookup,
		NodeName: "node-a", Registerer: prometheus.NewRegistry(), Routes: routes,
		LocalAddresses: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("127.0.0.1"), nodeIP}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	const services = 12
	rng := rand.New(rand.NewPCG(1, 2))
	tr := servicemap.NewTracker("node-a", nil)
	present := map[int]bool{}
	put := func(i int) {
		proto := v1.ProtocolTCP
		if i%3 == 0 {
			proto = v1.ProtocolUDP
		}
		var nodePort int32
		if i%4 == 1 {
			nodePort = int32(30000 + i)
		}
		svc := service(fmt.Sprintf("s%d", i), benchClusterIP(i+rng.IntN(2)*100), proto, nodePort)
		switch rng.IntN(4) {
		case 0:
			svc.Spec.ExternalIPs = []string{fmt.Sprintf("198.18.5.%d", i)}
		case 1:
			// Another service's cluster IP, on the same port.
			svc.Spec.ExternalIPs = []string{benchClusterIP((i + 1) % services)}
		}
		tr.OnServiceUpdate(svc)
		var ips []string
		for e := range rng.IntN(3) {
			ips = append(ips, fmt.Sprintf("198.19.1.%d", 10+e))
		}
		tr.OnEndpointSliceUpdate(slice(svc.Name, proto, ips...))
		present[i] = true
	}
	for i := range services {
		put(i)
	}
	tr.OnSynced()
	for step := range 300 {
		for range 1 + rng.IntN(3) {
			i := rng.IntN(services)
			switch {
			case present[i] && rng.IntN(4) == 0:
				name := fmt.Sprintf("s%d", i)
				tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: name})
				tr.OnEndpointSliceDelete(types.NamespacedName{Namespace: "ns", Name: name})
				delete(present, i)
			default:
				put(i)
			}
		}
		snap, changes := tr.Snapshot()
		changes.Periodic = rng.IntN(10) == 0
		if err := m.Sync(context.Background(), snap, changes); err != nil {
			t.Fatalf("step %d: sync: %v", step, err)
		}
		checkMatchesFullSync(t, step, m, snap, routes)
	}
}

// checkMatchesFullSync compares what m's syncs left with what a sync of all
// of snap makes.
func checkMatchesFullSync(t *testing.T, step int, m *Mode, snap *servicemap.Snapshot, routes *fakeroutes.Routes) {
	t.Helper()
	local, err := m.cfg.LocalAddresses()
	if err != nil {
		t.Fatal(err)
	}
	node := m.node(snap, local)
	want := m.wantedRelays(snap, node, m.localNodePortAddrs(snap, local))
	if !reflect.DeepEqual(m.want.relays, want) {
		t.Fatalf("step %d: wanted relays %v, a full sync wants %v", step, m.want.relays, want)
	}
	if !sameKeys(m.relays, want) {
		t.Fatalf("step %d: relays %v, want one for each of %v", step, slices.Collect(maps.Keys(m.relays)), slices.Collect(maps.Keys(want)))
	}
	st := m.steering
	made, _, overlapping := m.steeredFromAll()
	if overlapping {
		// The last relay met keeps an address two want, in either sync:
		// compare the addresses and the targets' keys only.
		if !sameKeys(*st.tcpRoutes.Load(), made.tcp) || !sameKeys(*st.udpRoutes.Load(), made.udp) || !sameKeys(st.targets, made.targets) {
			t.Fatalf("step %d: with overlapping relays the steered addresses differ from a full sync's", step)
		}
	} else {
		if !maps.Equal(*st.tcpRoutes.Load(), made.tcp) || !maps.Equal(*st.udpRoutes.Load(), made.udp) {
			t.Fatalf("step %d: routes differ from a full sync's:\ntcp %v\nwant %v\nudp %v\nwant %v", step,
				*st.tcpRoutes.Load(), made.tcp, *st.udpRoutes.Load(), made.udp)
		}
		if !maps.Equal(st.targets, made.targets) {
			t.Fatalf("step %d: targets %v, a full sync's %v", step, st.targets, made.targets)
		}
	}
	steered := addressCount{}
	for name, sp := range snap.All() {
		for _, a := range addressesOf(name, sp, m.families, true) {
			steered[a]++
		}
	}
	if !maps.Equal(m.addrs.steered, steered) || !sameKeys(st.guarded, steered) {
		t.Fatalf("step %d: guarded %v (counted %v), want %v", step, st.guarded, m.addrs.steered, steered)
	}
	var routed []netip.Addr
	for a := range steered {
		if !slices.Contains(local, a) {
			routed = append(routed, a)
		}
	}
	slices.SortFunc(routed, netip.Addr.Compare)
	if got := routes.Ours(); !slices.Equal(got, routed) {
		t.Fatalf("step %d: local routes %v, want %v", step, got, routed)
	}
}

func sameKeys[K comparable, V, W any](a map[K]V, b map[K]W) bool {
	return maps.EqualFunc(a, b, func(V, W) bool { return true })
}
