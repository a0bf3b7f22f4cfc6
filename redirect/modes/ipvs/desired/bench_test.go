package desired

import (
	"fmt"
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/servicemap"
)

// largeSnapshot makes n TCP service ports (cluster IP only) with eps ready
// endpoints each.
func largeSnapshot(n, eps int) *servicemap.Snapshot {
	ports := make([]*servicemap.ServicePort, 0, n)
	for i := range n {
		var e []servicemap.Endpoint
		for j := range eps {
			a := netip.AddrFrom4([4]byte{198, 19, byte(1 + (i*eps+j)/65536%200), byte((i*eps + j) / 256 % 256)})
			e = append(e, servicemap.Endpoint{Addr: a.Next(), Port: uint16(8000 + j), Ready: true, Serving: true})
		}
		ports = append(ports, testkit.Port("bench", fmt.Sprintf("svc-%05d", i), 80,
			netip.AddrFrom4([4]byte{198, 18, byte(i / 256), byte(i % 256)}).String(), testkit.Endpoints(e...)))
	}
	return servicemap.NewSnapshot(1, &servicemap.NodeInfo{Name: testkit.NodeName}, ports...)
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("ports=%d/endpoints=10", n), func(b *testing.B) {
			snap := largeSnapshot(n, 10)
			cfg := v4Config()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(cfg, snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
