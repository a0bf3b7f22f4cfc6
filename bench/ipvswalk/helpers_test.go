package ipvswalk

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/trace"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// The node: 198.19.0.1 (fd00:19::1), pods in 198.19.1.0/24
// (fd00:19:1::/64), VIPs in 198.18.0.0/16 (fd00:18::/64); see bench/testkit.

// configV4 tells pods from other sources by the pod CIDR.
func configV4(change ...func(*desired.Config)) desired.Config {
	c := desired.Config{
		Family:        ipfamily.IPv4,
		MasqueradeBit: 14,
		LocalAddrs:    testkit.Addrs("127.0.0.1", testkit.NodeIPv4),
		NodeIPs:       testkit.Addrs(testkit.NodeIPv4),
		ClusterCIDRs:  testkit.Prefixes("198.19.1.0/24"),
		Topology:      servicemap.Topology{NodeName: testkit.NodeName},
	}
	for _, ch := range change {
		ch(&c)
	}
	return c
}

func configV6() desired.Config {
	return desired.Config{
		Family:        ipfamily.IPv6,
		MasqueradeBit: 14,
		LocalAddrs:    testkit.Addrs("::1", testkit.NodeIPv6),
		NodeIPs:       testkit.Addrs(testkit.NodeIPv6),
		ClusterCIDRs:  testkit.Prefixes("fd00:19:1::/64"),
		Topology:      servicemap.Topology{NodeName: testkit.NodeName},
	}
}

// svc is port "default/name:p" over TCP on cluster IP vip:port.
func svc(name, vipPort string, opts ...testkit.PortOpt) *servicemap.ServicePort {
	ap := netip.MustParseAddrPort(vipPort)
	return testkit.Port("default", name, ap.Port(), ap.Addr().String(), append([]testkit.PortOpt{testkit.Named("p")}, opts...)...)
}

// lb gives the port a load-balancer IP and its source ranges.
func lb(ip string, ranges ...string) testkit.PortOpt {
	return func(sp *servicemap.ServicePort) {
		testkit.LoadBalancerIPs(ip)(sp)
		testkit.SourceRanges(ranges...)(sp)
	}
}

func sticky(sp *servicemap.ServicePort) { testkit.Affinity(3 * time.Hour)(sp) }

// eps lists ready endpoints "addr:port"; a "local " prefix puts one on
// this node, else it is on another.
func eps(list ...string) testkit.PortOpt {
	return func(sp *servicemap.ServicePort) {
		for _, s := range list {
			addrPort, isLocal := strings.CutPrefix(s, "local ")
			if isLocal {
				sp.Endpoints = append(sp.Endpoints, testkit.EP(addrPort, testkit.Local))
				continue
			}
			sp.Endpoints = append(sp.Endpoints, testkit.EP(addrPort))
		}
	}
}

func build(t *testing.T, cfg desired.Config, ports ...*servicemap.ServicePort) *desired.State {
	t.Helper()
	st, err := desired.Build(cfg, testkit.Snapshot(ports...))
	if err != nil {
		t.Fatalf("desired.Build: %v", err)
	}
	return st
}

type packetOption func(*trace.Packet)

// packet is a TCP packet from src to dst ("addr:port"), arriving from
// elsewhere unless an option says otherwise.
func packet(src, dst string, opts ...packetOption) trace.Packet {
	d := netip.MustParseAddrPort(dst)
	p := trace.Packet{Source: netip.MustParseAddr(src), Destination: d.Addr(), DestinationPort: d.Port(),
		Protocol: "tcp", Entry: trace.Forwarded, InInterface: "eth0", OutInterface: "eth0"}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// fromNode: sent by a process on the node.
func fromNode(p *trace.Packet) { p.Entry, p.InInterface = trace.Local, "" }

// fromPod: from a pod on this node's bridge.
func fromPod(p *trace.Packet) { p.InInterface = "cni0" }

func overUDP(p *trace.Packet)  { p.Protocol = "udp" }
func overSCTP(p *trace.Packet) { p.Protocol = "sctp" }
