package iptables

import (
	"fmt"
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/trace"
)

// TestPacketsReachTheRightEndpoints syncs a snapshot of representative
// services into the fake and traces first packets through the resulting
// rules, from a pod, from outside the cluster and from the node itself.
func TestPacketsReachTheRightEndpoints(t *testing.T) {
	const (
		pod     = "198.19.1.50" // inside the cluster CIDR 198.19.1.0/24
		outside = "198.19.9.7"  // a client host beyond the node
		other   = "198.19.8.7"  // another client, outside the LB's source ranges
		nodeIP  = "198.19.0.1"
	)
	web := svc(name("web", "http"), "198.18.0.1", 11, 12)
	web.NodePort = 30080
	web.ExternalIPs = []netip.Addr{netip.MustParseAddr("198.18.5.10")}
	empty := svc(name("empty", "http"), "198.18.0.2")
	lb := svc(name("lb", "http"), "198.18.0.3", 13)
	lb.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("198.18.6.1")}
	lb.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("198.19.9.0/24")}
	local := svc(name("local", "http"), "198.18.0.4", 11) // endpoint on another node
	local.NodePort = 30081
	local.ExternalPolicyLocal = true
	local.HealthCheckNodePort = 30900

	h := newHarness(t, 0)
	if err := h.sync(t, true, nil, nil, web, empty, lb, local); err != nil {
		t.Fatal(err)
	}
	dump := h.fake.Save("")
	node := trace.Node{LocalAddresses: []netip.Addr{netip.MustParseAddr(nodeIP), netip.MustParseAddr("127.0.0.1")}}

	ep := func(last int, port uint16) netip.AddrPort {
		return netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("198.19.1.%d", last)), port)
	}
	tests := []struct {
		name       string
		src, dst   string
		port       uint16
		entry      trace.Entry
		verdict    trace.Verdict
		want       map[netip.AddrPort]float64
		masquerade bool
	}{
		{name: "pod to cluster IP: both endpoints, source kept", src: pod, dst: "198.18.0.1", port: 80, entry: trace.Forwarded,
			verdict: trace.Accepted, want: map[netip.AddrPort]float64{ep(11, 8080): 0.5, ep(12, 8080): 0.5}},
		{name: "off-cluster source to cluster IP is masqueraded", src: outside, dst: "198.18.0.1", port: 80, entry: trace.Forwarded,
			verdict: trace.Accepted, want: map[netip.AddrPort]float64{ep(11, 8080): 0.5, ep(12, 8080): 0.5}, masquerade: true},
		{name: "NodePort from outside", src: outside, dst: nodeIP, port: 30080, entry: trace.Forwarded,
			verdict: trace.Accepted, want: map[netip.AddrPort]float64{ep(11, 8080): 0.5, ep(12, 8080): 0.5}, masquerade: true},
		{name: "external IP from outside", src: outside, dst: "198.18.5.10", port: 80, entry: trace.Forwarded,
			verdict: trace.Accepted, want: map[netip.AddrPort]float64{ep(11, 8080): 0.5, ep(12, 8080): 0.5}, masquerade: true},
		{name: "cluster IP from the node itself", src: nodeIP, dst: "198.18.0.1", port: 80, entry: trace.Local,
			verdict: trace.Accepted, want: map[netip.AddrPort]float64{ep(11, 8080): 0.5, ep(12, 8080): 0.5}, masquerade: true},
		{name: "no endpoints: rejected", src: pod, dst: "198.18.0.2", port: 80, entry: trace.Forwarded, verdict: trace.Rejected},
		{name: "LB IP from an allowed source", src: outside, dst: "198.18.6.1", port: 80, entry: trace.Forwarded,
			verdict: trace.Accepted, want: map[netip.AddrPort]float64{ep(13, 8080): 1}, masquerade: true},
		{name: "LB IP from a source outside the ranges: dropped", src: other, dst: "198.18.6.1", port: 80, entry: trace.Forwarded,
			verdict: trace.Dropped},
		{name: "externalTrafficPolicy Local without local endpoints: NodePort dropped", src: outside, dst: nodeIP, port: 30081,
			entry: trace.Forwarded, verdict: trace.Dropped},
		{name: "externalTrafficPolicy Local: cluster IP still reaches the remote endpoint", src: pod, dst: "198.18.0.4", port: 80,
			entry: trace.Forwarded, verdict: trace.Accepted, want: map[netip.AddrPort]float64{ep(11, 8080): 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := trace.Run(dump, trace.Packet{
				Source: netip.MustParseAddr(tt.src), Destination: netip.MustParseAddr(tt.dst),
				Protocol: "tcp", DestinationPort: tt.port, Entry: tt.entry,
			}, node)
			if err != nil {
				t.Fatalf("trace: %v", err)
			}
			if res.Verdict != tt.verdict {
				t.Fatalf("verdict %s, want %s:\n%s", res.Verdict, tt.verdict, res)
			}
			if tt.verdict != trace.Accepted {
				return
			}
			got := res.Destinations()
			if len(got) != len(tt.want) {
				t.Fatalf("destinations %v, want %v:\n%s", got, tt.want, res)
			}
			for dst, p := range tt.want {
				if d := got[dst] - p; d > 1e-6 || d < -1e-6 {
					t.Errorf("%s reached with probability %.4f, want %.4f:\n%s", dst, got[dst], p, res)
				}
			}
			for _, path := range res.Paths {
				if path.Masqueraded != tt.masquerade {
					t.Errorf("path to %s masqueraded=%v, want %v:\n%s", path.Destination, path.Masqueraded, tt.masquerade, res)
				}
			}
		})
	}
}
