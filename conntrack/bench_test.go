package conntrack

import (
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// The cleanup benchmark's table: benchServices UDP services (a cluster IP
// and a node port each) of benchEndpoints endpoints, and benchFlows flows
// spread evenly over them, each pinned to one endpoint, as DNAT leaves them.
const (
	benchFlows     = 100_000
	benchServices  = 200
	benchEndpoints = 10
	// benchChanged services lose one endpoint each in the measured sync.
	benchChanged = 20
)

func benchVIP(s int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(s / 250), byte(s%250 + 1)})
}

func benchEndpoint(s, e int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(100 + s/25), byte((s%25)*10 + e + 1)}), 9000)
}

// benchTable returns the table's flows and the filters of a sync in which
// the first benchChanged services lose their first endpoint, with the flows
// those filters select.
func benchTable() (flows []Flow, filters []Filter, stale []Flow) {
	for i := range benchFlows {
		s, e := i%benchServices, (i/benchServices)%benchEndpoints
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(2 + i/60000), byte(i % 250)}), uint16(1024+(i/250)%60000))
		f := Flow{Protocol: UDP, OrigSrc: client, OrigDst: netip.AddrPortFrom(benchVIP(s), 53), ReplySrc: benchEndpoint(s, e)}
		flows = append(flows, f)
		if s < benchChanged && e == 0 {
			stale = append(stale, f)
		}
	}
	for s := range benchChanged {
		ep := benchEndpoint(s, 0)
		filters = append(filters,
			FlowsAnsweredBy(UDP, ServiceAddress(netip.AddrPortFrom(benchVIP(s), 53)), ep),
			FlowsAnsweredBy(UDP, NodePortOf(ipfamily.IPv4, uint16(30000+s)), ep))
	}
	return flows, filters, stale
}

// benchExpectations is reconciliation after that sync: every service
// destination with its remaining serving endpoints.
func benchExpectations() *Expectations {
	e := &Expectations{Dataplane: KernelNAT, Endpoints: map[Destination][]netip.AddrPort{}}
	for s := range benchServices {
		first := 0
		if s < benchChanged {
			first = 1
		}
		for ep := first; ep < benchEndpoints; ep++ {
			for _, dst := range []Destination{ServiceAddress(netip.AddrPortFrom(benchVIP(s), 53)), NodePortOf(ipfamily.IPv4, uint16(30000+s))} {
				e.Endpoints[dst] = append(e.Endpoints[dst], benchEndpoint(s, ep))
			}
		}
	}
	return e
}

// BenchmarkCleanup100k times one cleanup pass over a conntrack table of
// 100,000 UDP flows, deleting the 1,000 flows of 20 removed endpoints: with
// the sync's filters, and with a reconciliation that finds the same flows.
func BenchmarkCleanup100k(b *testing.B) {
	flows, filters, stale := benchTable()
	node := testkit.Addrs("198.19.0.1", "127.0.0.1")
	for _, bc := range []struct {
		name string
		req  Request
	}{
		{"filters", Request{Family: ipfamily.IPv4, Local: node, Filters: filters}},
		{"reconcile", Request{Family: ipfamily.IPv4, Local: node, Reconcile: benchExpectations()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if lab.InFreshNetns(b) {
				return
			}
			h := netfilterHandle(b)
			if err := insertFlows(h, flows...); err != nil {
				b.Fatal(err)
			}
			table, err := NewNetlinkTable()
			if err != nil {
				b.Fatal(err)
			}
			defer table.Close()
			b.ResetTimer()
			for b.Loop() {
				n, err := table.Delete(&bc.req)
				if err != nil {
					b.Fatal(err)
				}
				if n != len(stale) {
					b.Fatalf("deleted %d flows, want %d", n, len(stale))
				}
				b.StopTimer()
				if err := insertFlows(h, stale...); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(len(flows)), "flows/table")
			b.ReportMetric(float64(len(stale)), "deleted/op")
		})
	}
}

func TestBenchTableShape(t *testing.T) {
	flows, filters, stale := benchTable()
	seen := map[Flow]bool{}
	for _, f := range flows {
		seen[f] = true
	}
	if len(seen) != benchFlows {
		t.Errorf("the benchmark table has %d distinct flows, want %d", len(seen), benchFlows)
	}
	want := benchFlows / benchServices / benchEndpoints * benchChanged
	if len(stale) != want || len(filters) != 2*benchChanged {
		t.Errorf("%d stale flows and %d filters, want %d and %d", len(stale), len(filters), want, 2*benchChanged)
	}
	// The two requests select the same flows, and only those.
	for _, req := range []Request{{Family: ipfamily.IPv4, Filters: filters}, {Family: ipfamily.IPv4, Reconcile: benchExpectations()}} {
		m, n := req.Matcher(), 0
		for _, f := range flows {
			if m.Match(f) {
				n++
			}
		}
		if n != len(stale) {
			t.Errorf("request (reconcile %v) selects %d flows, want %d", req.Reconcile != nil, n, len(stale))
		}
	}
}

// BenchmarkStoppedRelays times the deletion that follows a userspace-mode
// stop: every UDP flow to a service address goes, here all 30,000 flows of
// the table, each on its own client port.
func BenchmarkStoppedRelays(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	const n = 30_000
	vip := netip.MustParseAddrPort("198.18.0.53:53")
	var flows []Flow
	for i := range n {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 0, byte(2 + i/60000)}), uint16(1024+i%60000))
		flows = append(flows, Flow{Protocol: UDP, OrigSrc: client, OrigDst: vip, ReplySrc: netip.MustParseAddrPort("198.19.0.1:40000")})
	}
	h := netfilterHandle(b)
	table, err := NewNetlinkTable()
	if err != nil {
		b.Fatal(err)
	}
	defer table.Close()
	req := &Request{Family: ipfamily.IPv4, Filters: []Filter{AllFlowsTo(UDP, ServiceAddress(vip))}}
	for b.Loop() {
		b.StopTimer()
		if err := insertFlows(h, flows...); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		deleted, err := table.Delete(req)
		if err != nil {
			b.Fatal(err)
		}
		if deleted != n {
			b.Fatalf("deleted %d flows, want %d", deleted, n)
		}
	}
	b.ReportMetric(n, "deleted/op")
}
