package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// planOnly is an nftables interface that renders each transaction's text,
// as the real one does before running nft, and applies nothing: what a
// benchmark of it measures is kproxy's own planning.
type planOnly struct {
	*knftables.Fake
	bytes int
	// gen stands for nf_tables' generation: one more per transaction, as
	// the kernel counts them, so that the mode sees only its own writes.
	gen uint32
}

func (p *planOnly) Run(_ context.Context, tx *knftables.Transaction) error {
	p.bytes = len(tx.String())
	p.gen++
	return nil
}

// planOnly is its own Lister: the table holds what the mode wrote.
func (p *planOnly) Names(context.Context) ([]string, []string, error) { return nil, nil, nil }

func (p *planOnly) RuleCount(context.Context, string) (int, error) { return 1, nil }

func (p *planOnly) ElementCount(context.Context, string, bool) (int, error) {
	return 0, errors.New("planOnly holds no elements: the generation must make the check unnecessary")
}

func (p *planOnly) Generation(context.Context) (uint32, error) { return p.gen, nil }

func (p *planOnly) ListAll(context.Context) (map[string][]string, error) { return nil, nil }

// ListRules answers the canary: the table is intact, as the kernel's
// would be.
func (p *planOnly) ListRules(context.Context, string) ([]*knftables.Rule, error) {
	return []*knftables.Rule{{Rule: "reject"}}, nil
}

// scalePorts returns n ClusterIP service ports of 10 endpoints each, with
// distinct addresses (cluster IPs in 198.18.0.0/16 and 198.20.0.0/14
// beyond, endpoints in 10.0.0.0/8).
func scalePorts(n int) []*servicemap.ServicePort {
	out := make([]*servicemap.ServicePort, n)
	for i := range n {
		cip := netip.AddrFrom4([4]byte{198, byte(18 + i>>16), byte(i >> 8), byte(i)})
		eps := make([]servicemap.Endpoint, 10)
		for e := range eps {
			ep := i*10 + e
			eps[e] = servicemap.Endpoint{Addr: netip.AddrFrom4([4]byte{10, byte(ep >> 16), byte(ep >> 8), byte(ep)}), Port: 8080,
				Ready: true, Serving: true, NodeName: testkit.OtherNode}
		}
		out[i] = testkit.Port("scale", "svc"+strconv.Itoa(i), 80, cip.String(), testkit.Endpoints(eps...))
	}
	return out
}

// oneEndpointChange returns ports with port i's last endpoint moved, and
// the change set for it.
func oneEndpointChange(ports []*servicemap.ServicePort, i, round int) ([]*servicemap.ServicePort, *servicemap.ChangeSet) {
	sp := *ports[i]
	sp.Endpoints = append([]servicemap.Endpoint(nil), sp.Endpoints...)
	last := &sp.Endpoints[len(sp.Endpoints)-1]
	last.Port = uint16(9000 + round%2)
	next := append([]*servicemap.ServicePort(nil), ports...)
	next[i] = &sp
	return next, &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{sp.Name}}
}

var benchSizes = []int{1000, 10000, 30000}

// BenchmarkPlanFull is the planning of a first full sync (every port's
// objects, the transaction's text) at 1,000 to 30,000 services of 10
// endpoints; nft's own time is measured by the kernel benchmark.
func BenchmarkPlanFull(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			snap := snapshotOf(1, scalePorts(n)...)
			b.ReportAllocs()
			var nft *planOnly
			for b.Loop() {
				nft = &planOnly{Fake: fakeFor(ipfamily.IPv4)}
				m := newTestMode(b, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: nft})
				mustSync(b, m, snap, full())
			}
			b.ReportMetric(float64(nft.bytes), "tx-bytes")
		})
	}
}

// BenchmarkPlanOneChange is the planning of a partial sync after one
// endpoint of one service changed: it must not grow with the services.
func BenchmarkPlanOneChange(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			ports := scalePorts(n)
			nft := &planOnly{Fake: fakeFor(ipfamily.IPv4)}
			m := newTestMode(b, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: nft})
			mustSync(b, m, snapshotOf(1, ports...), full())
			// Two snapshots differing in one endpoint, made beforehand:
			// building a snapshot is the service map's work, not the mode's.
			var snaps [2]*servicemap.Snapshot
			var changes [2]*servicemap.ChangeSet
			for r := range 2 {
				next, cs := oneEndpointChange(ports, n/2, r)
				snaps[r], changes[r] = snapshotOf(uint64(r+2), next...), cs
			}
			b.ReportAllocs()
			round := 0
			for b.Loop() {
				round++
				mustSync(b, m, snaps[round%2], changes[round%2])
			}
			if nft.bytes > 4096 {
				b.Fatalf("one endpoint change wrote a %d-byte transaction: the sync was not partial", nft.bytes)
			}
			b.ReportMetric(float64(nft.bytes), "tx-bytes")
		})
	}
}
