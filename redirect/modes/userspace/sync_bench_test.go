package userspace

import (
	"context"
	"fmt"
	"net/netip"
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

// BenchmarkSync is the sync of one event among many services with
// socket-lookup portals (the kind that scales to 30,000 services): its cost
// should follow the change, not the service count. one-change changes one
// endpoint; new-service adds a Service, then its EndpointSlice, synced
// each on its own, as a client waiting for a new service sees it.
func BenchmarkSync(b *testing.B) {
	for _, n := range []int{1000, 30000} {
		b.Run(fmt.Sprintf("services-%d/one-change", n), func(b *testing.B) {
			tr, sync := startSyncBench(b, n)
			if tr == nil {
				return
			}
			for i := range b.N {
				ips := []string{"198.19.1.11"}
				if i%2 == 0 {
					ips = append(ips, "198.19.1.12")
				}
				tr.OnEndpointSliceUpdate(slice(fmt.Sprintf("s%d", n/2), v1.ProtocolTCP, ips...))
				sync()
			}
		})
		b.Run(fmt.Sprintf("services-%d/new-service", n), func(b *testing.B) {
			tr, sync := startSyncBench(b, n)
			if tr == nil {
				return
			}
			for i := range b.N {
				name := fmt.Sprintf("new%d", i)
				tr.OnServiceUpdate(service(name, benchClusterIP(n+i%1000), v1.ProtocolTCP, 0))
				sync()
				tr.OnEndpointSliceUpdate(slice(name, v1.ProtocolTCP, "198.19.1.11"))
				sync()
				b.StopTimer()
				tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: name})
				tr.OnEndpointSliceDelete(types.NamespacedName{Namespace: "ns", Name: name})
				sync()
				b.StartTimer()
			}
		})
	}
}

// startSyncBench runs the mode in a fresh network namespace on n services
// (one endpoint each), synced once, and returns their tracker and a sync of
// its next snapshot; a nil tracker means the benchmark ran in the namespace.
func startSyncBench(b *testing.B, n int) (*servicemap.Tracker, func()) {
	if lab.InFreshNetns(b) {
		return nil, nil
	}
	nodeIP := netip.MustParseAddr("198.19.0.1")
	m, err := New(context.Background(), Config{
		Features: kernel.Features{SKLookup: kernel.Support{Present: true}}, Portals: contract.PortalsSKLookup,
		NodeName: "node-a", Registerer: prometheus.NewRegistry(), Routes: fakeroutes.New(nodeIP),
		LocalAddresses: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("127.0.0.1"), nodeIP}, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	tr := servicemap.NewTracker("node-a", nil)
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		tr.OnServiceUpdate(service(name, benchClusterIP(i), v1.ProtocolTCP, 0))
		tr.OnEndpointSliceUpdate(slice(name, v1.ProtocolTCP, "198.19.1.11"))
	}
	tr.OnSynced()
	sync := func() {
		snap, changes := tr.Snapshot()
		if err := m.Sync(context.Background(), snap, changes); err != nil {
			b.Fatal(err)
		}
	}
	sync()
	b.ReportAllocs()
	b.ResetTimer()
	return tr, sync
}

// benchClusterIP is the i-th cluster IP of 198.18.0.0/16, from 198.18.0.1.
func benchClusterIP(i int) string {
	return netip.AddrFrom4([4]byte{198, 18, byte((i + 1) >> 8), byte(i + 1)}).String()
}
