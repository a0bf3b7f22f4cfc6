package reconcile

import (
	"context"
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

// BenchmarkOneEndpointChange syncs 10,000 service ports of 10 endpoints,
// then alternates one port's endpoint; ops/sync is the netlink operations
// per sync (target: a handful, whatever the port count).
func BenchmarkOneEndpointChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			g := newRig(b)
			base := manyPorts(n, 10)
			states := make([]*desired.State, 2)
			for i := range states {
				ports := slices.Clone(base)
				ports[0] = svc(base[0].Name.Name, v1.ProtocolTCP, "198.18.0.0", 80, fmt.Sprintf("198.19.250.%d:80", i+1))
				states[i] = build(b, cfg(), ports...)
			}
			if _, err := g.r.Sync(context.Background(), states[0], false); err != nil {
				b.Fatal(err)
			}
			g.setHook(nil)
			g.resetCounts()
			syncs := 0
			for b.Loop() {
				syncs++
				if _, err := g.r.Sync(context.Background(), states[syncs%2], false); err != nil {
					b.Fatal(err)
				}
			}
			total := g.ipvs.Total() + g.link.Total() + g.sets.Total()
			b.ReportMetric(float64(total)/float64(syncs), "ops/sync")
		})
	}
}
