package conntrack

import (
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// flow builds a flow: "udp 198.19.0.2:40000 -> 198.18.0.10:53 reply 198.19.1.11:9000".
func flow(proto Protocol, src, dst, reply string) Flow {
	return Flow{Protocol: proto, OrigSrc: ap(src), OrigDst: ap(dst), ReplySrc: ap(reply)}
}

func TestMatcher(t *testing.T) {
	vip := ServiceAddress(ap("198.18.0.10:53"))
	nodeIP := "198.19.0.1"
	node := testkit.Addrs(nodeIP, "127.0.0.1")
	kernelNAT := &Expectations{Dataplane: KernelNAT, Endpoints: map[Destination][]netip.AddrPort{
		vip:                                  {ap("198.19.1.11:9000")},
		NodePortOf(ipfamily.IPv4, 30053):     {ap("198.19.1.11:9000")},
		ServiceAddress(ap("198.18.0.11:53")): nil, // no serving endpoint
	}}
	relays := func(bound ...uint16) *Expectations {
		return &Expectations{Dataplane: LocalRelays, BoundPorts: bound, Endpoints: map[Destination][]netip.AddrPort{
			vip: nil, NodePortOf(ipfamily.IPv4, 30053): nil,
		}}
	}
	tests := []struct {
		name string
		req  Request
		flow Flow
		want bool
	}{
		// Filters.
		{"every flow to a destination", Request{Family: ipfamily.IPv4, Filters: []Filter{AllFlowsTo(UDP, vip)}},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.12:9000"), true},
		{"another port of the same address", Request{Family: ipfamily.IPv4, Filters: []Filter{AllFlowsTo(UDP, vip)}},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:54", "198.19.1.12:9000"), false},
		{"another protocol", Request{Family: ipfamily.IPv4, Filters: []Filter{AllFlowsTo(UDP, vip)}},
			flow(TCP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.12:9000"), false},
		{"answered by the endpoint", Request{Family: ipfamily.IPv4, Filters: []Filter{FlowsAnsweredBy(UDP, vip, ap("198.19.1.11:9000"))}},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.11:9000"), true},
		{"answered by another endpoint", Request{Family: ipfamily.IPv4, Filters: []Filter{FlowsAnsweredBy(UDP, vip, ap("198.19.1.11:9000"))}},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.12:9000"), false},
		{"answered by the endpoint's address on another port", Request{Family: ipfamily.IPv4, Filters: []Filter{FlowsAnsweredBy(UDP, vip, ap("198.19.1.11:9000"))}},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.11:9001"), false},
		{"untranslated", Request{Family: ipfamily.IPv4, Filters: []Filter{UntranslatedFlowsTo(UDP, vip)}},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.18.0.10:53"), true},
		{"translated is not untranslated", Request{Family: ipfamily.IPv4, Filters: []Filter{UntranslatedFlowsTo(UDP, vip)}},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.11:9000"), false},
		{"a node port on a node address", Request{Family: ipfamily.IPv4, Local: node, Filters: []Filter{AllFlowsTo(UDP, NodePortOf(ipfamily.IPv4, 30053))}},
			flow(UDP, "198.19.0.2:40000", nodeIP+":30053", "198.19.1.11:9000"), true},
		{"a node port on localhost", Request{Family: ipfamily.IPv4, Local: node, Filters: []Filter{AllFlowsTo(UDP, NodePortOf(ipfamily.IPv4, 30053))}},
			flow(UDP, "127.0.0.1:40000", "127.0.0.1:30053", "198.19.1.11:9000"), true},
		{"the node port's number on another host", Request{Family: ipfamily.IPv4, Local: node, Filters: []Filter{AllFlowsTo(UDP, NodePortOf(ipfamily.IPv4, 30053))}},
			flow(UDP, "198.19.0.2:40000", "203.0.113.9:30053", "203.0.113.9:30053"), false},
		{"a node port when the node's addresses are unknown: any address", Request{Family: ipfamily.IPv4, Filters: []Filter{AllFlowsTo(UDP, NodePortOf(ipfamily.IPv4, 30053))}},
			flow(UDP, "198.19.0.2:40000", "203.0.113.9:30053", "203.0.113.9:30053"), true},
		{"an IPv6 flow in an IPv4 pass", Request{Family: ipfamily.IPv4, Filters: []Filter{AllFlowsTo(UDP, NodePortOf(ipfamily.IPv4, 30053))}},
			flow(UDP, "[fd00:19::2]:40000", "[fd00:19::1]:30053", "[fd00:19:1::11]:9000"), false},
		{"an IPv6 destination", Request{Family: ipfamily.IPv6, Filters: []Filter{AllFlowsTo(UDP, ServiceAddress(ap("[fd00:18::10]:53")))}},
			flow(UDP, "[fd00:19::2]:40000", "[fd00:18::10]:53", "[fd00:19:1::11]:9000"), true},

		// Reconciliation, kernel NAT.
		{"reconcile: answered by a serving endpoint", Request{Family: ipfamily.IPv4, Reconcile: kernelNAT},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.11:9000"), false},
		{"reconcile: answered by anything else", Request{Family: ipfamily.IPv4, Reconcile: kernelNAT},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.13:9000"), true},
		{"reconcile: untranslated", Request{Family: ipfamily.IPv4, Reconcile: kernelNAT},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.18.0.10:53"), true},
		{"reconcile: a destination without serving endpoints", Request{Family: ipfamily.IPv4, Reconcile: kernelNAT},
			flow(UDP, "198.19.0.2:40000", "198.18.0.11:53", "198.19.1.11:9000"), true},
		{"reconcile: not a service destination", Request{Family: ipfamily.IPv4, Reconcile: kernelNAT},
			flow(UDP, "198.19.0.2:40000", "198.18.0.12:53", "198.19.1.13:9000"), false},
		{"reconcile: TCP is never reconciled", Request{Family: ipfamily.IPv4, Reconcile: kernelNAT},
			flow(TCP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.13:9000"), false},
		{"reconcile: a node port answered by a serving endpoint", Request{Family: ipfamily.IPv4, Local: node, Reconcile: kernelNAT},
			flow(UDP, "198.19.0.2:40000", nodeIP+":30053", "198.19.1.11:9000"), false},
		{"reconcile: a node port answered by anything else", Request{Family: ipfamily.IPv4, Local: node, Reconcile: kernelNAT},
			flow(UDP, "198.19.0.2:40000", nodeIP+":30053", nodeIP+":30053"), true},
		{"reconcile: the node port's number on another host", Request{Family: ipfamily.IPv4, Local: node, Reconcile: kernelNAT},
			flow(UDP, "198.19.0.2:40000", "203.0.113.9:30053", "203.0.113.9:30053"), false},

		// Reconciliation, local relays.
		{"relays: redirected to a bound port of the node", Request{Family: ipfamily.IPv4, Local: node, Reconcile: relays(41000)},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", nodeIP+":41000"), false},
		{"relays: redirected to a port nothing is bound to", Request{Family: ipfamily.IPv4, Local: node, Reconcile: relays(41000)},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", nodeIP+":41001"), true},
		{"relays: bound ports unknown", Request{Family: ipfamily.IPv4, Local: node, Reconcile: relays()},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", nodeIP+":41001"), false},
		{"relays: translated to another host (an endpoint, as kernel NAT would)", Request{Family: ipfamily.IPv4, Local: node, Reconcile: relays(9000)},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.19.1.11:9000"), true},
		{"relays: untranslated", Request{Family: ipfamily.IPv4, Local: node, Reconcile: relays(53)},
			flow(UDP, "198.19.0.2:40000", "198.18.0.10:53", "198.18.0.10:53"), true},
		{"relays: an untranslated node port held by a claim socket", Request{Family: ipfamily.IPv4, Local: node, Reconcile: relays(30053)},
			flow(UDP, "198.19.0.2:40000", nodeIP+":30053", nodeIP+":30053"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.req.Matcher().Match(tt.flow); got != tt.want {
				t.Errorf("Match(%v) = %v, want %v", tt.flow, got, tt.want)
			}
		})
	}
}

func TestRequestEmpty(t *testing.T) {
	for _, tt := range []struct {
		req  Request
		want bool
	}{
		{Request{Family: ipfamily.IPv4}, true},
		{Request{Family: ipfamily.IPv4, Local: testkit.Addrs("198.19.0.1")}, true},
		{Request{Family: ipfamily.IPv4, Filters: []Filter{AllFlowsTo(UDP, NodePortOf(ipfamily.IPv4, 1))}}, false},
		{Request{Family: ipfamily.IPv4, Reconcile: &Expectations{}}, false},
	} {
		if got := tt.req.Empty(); got != tt.want {
			t.Errorf("%+v: Empty() = %v, want %v", tt.req, got, tt.want)
		}
	}
}
