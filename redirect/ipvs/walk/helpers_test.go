package walk

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/redirect/fakeiptables/trace"
	"kproxy.dev/kproxy/redirect/ipvs/desired"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/servicemap"
)

// The node: 198.19.0.1 (fd00:19::1), pods in 198.19.1.0/24
// (fd00:19:1::/64), VIPs in 198.18.0.0/16 (fd00:18::/64).
const thisNode = "node-a"

func mustAddrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// configV4 tells pods from other sources by the pod CIDR.
func configV4(change ...func(*desired.Config)) desired.Config {
	c := desired.Config{
		Family:        kernel.IPv4,
		MasqueradeBit: 14,
		LocalAddrs:    mustAddrs("127.0.0.1", "198.19.0.1"),
		NodeIPs:       mustAddrs("198.19.0.1"),
		ClusterCIDRs:  mustPrefixes("198.19.1.0/24"),
		Topology:      servicemap.Topology{NodeName: thisNode},
	}
	for _, ch := range change {
		ch(&c)
	}
	return c
}

func configV6() desired.Config {
	return desired.Config{
		Family:        kernel.IPv6,
		MasqueradeBit: 14,
		LocalAddrs:    mustAddrs("::1", "fd00:19::1"),
		NodeIPs:       mustAddrs("fd00:19::1"),
		ClusterCIDRs:  mustPrefixes("fd00:19:1::/64"),
		Topology:      servicemap.Topology{NodeName: thisNode},
	}
}

type portOption func(*servicemap.ServicePort)

// svc is port "ns/name:p" over TCP on cluster IP vip:port.
func svc(name, vipPort string, opts ...portOption) *servicemap.ServicePort {
	ap := netip.MustParseAddrPort(vipPort)
	sp := &servicemap.ServicePort{
		Name: servicemap.ServicePortName{
			NamespacedName: types.NamespacedName{Namespace: "default", Name: name}, Port: "p", Protocol: v1.ProtocolTCP,
		},
		ClusterIPs: []netip.Addr{ap.Addr()},
		Port:       ap.Port(),
	}
	for _, o := range opts {
		o(sp)
	}
	return sp
}

func proto(p v1.Protocol) portOption {
	return func(sp *servicemap.ServicePort) { sp.Name.Protocol = p }
}
func nodePort(p uint16) portOption { return func(sp *servicemap.ServicePort) { sp.NodePort = p } }
func lb(ip string, ranges ...string) portOption {
	return func(sp *servicemap.ServicePort) {
		sp.LoadBalancerIPs = mustAddrs(ip)
		sp.LoadBalancerSourceRanges = mustPrefixes(ranges...)
	}
}
func externalLocal(healthCheck uint16) portOption {
	return func(sp *servicemap.ServicePort) { sp.ExternalPolicyLocal, sp.HealthCheckNodePort = true, healthCheck }
}
func sticky(sp *servicemap.ServicePort) { sp.AffinityTimeout = 3 * time.Hour }

// eps lists ready endpoints "addr:port"; a "local " prefix puts one on
// this node, else it is on node-b.
func eps(list ...string) portOption {
	return func(sp *servicemap.ServicePort) {
		for _, s := range list {
			addrPort, isLocal := strings.CutPrefix(s, "local ")
			ap := netip.MustParseAddrPort(addrPort)
			e := servicemap.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, NodeName: "node-b"}
			if isLocal {
				e.IsLocal, e.NodeName = true, thisNode
			}
			sp.Endpoints = append(sp.Endpoints, e)
		}
	}
}

func build(t *testing.T, cfg desired.Config, ports ...*servicemap.ServicePort) *desired.State {
	t.Helper()
	st, err := desired.Build(cfg, servicemap.NewSnapshot(1, &servicemap.NodeInfo{Name: thisNode}, ports...))
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
