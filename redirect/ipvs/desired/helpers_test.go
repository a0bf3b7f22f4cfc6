package desired

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Fixtures: VIPs in 198.18.0.0/16, node and pods in 198.19.0.0/16 (pods in
// 198.19.1.0/24), IPv6 under fd00::.
const nodeName = "node-a"

func v4Config() Config {
	return Config{
		Family:        kernel.IPv4,
		MasqueradeBit: 14,
		LocalAddrs:    addrs("127.0.0.1", "198.19.0.1"),
		NodeIPs:       addrs("198.19.0.1"),
		Topology:      servicemap.Topology{NodeName: nodeName, Zone: "zone-a"},
	}
}

func v6Config() Config {
	return Config{
		Family:        kernel.IPv6,
		MasqueradeBit: 14,
		LocalAddrs:    addrs("::1", "fd00:19::1"),
		NodeIPs:       addrs("fd00:19::1"),
		Topology:      servicemap.Topology{NodeName: nodeName, Zone: "zone-a"},
	}
}

func with(c Config, change func(*Config)) Config { change(&c); return c }

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

type portOpt func(*servicemap.ServicePort)

// port returns "ns/name:http" over TCP with the given cluster IPs.
func port(ns, name string, p uint16, clusterIPs string, opts ...portOpt) *servicemap.ServicePort {
	sp := &servicemap.ServicePort{
		Name: servicemap.ServicePortName{
			NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: "http", Protocol: v1.ProtocolTCP,
		},
		ClusterIPs: addrs(strings.Split(clusterIPs, ",")...),
		Port:       p,
	}
	for _, o := range opts {
		o(sp)
	}
	return sp
}

func protocol(p v1.Protocol) portOpt {
	return func(sp *servicemap.ServicePort) { sp.Name.Protocol = p }
}
func nodePort(p uint16) portOpt { return func(sp *servicemap.ServicePort) { sp.NodePort = p } }
func externalIPs(ips ...string) portOpt {
	return func(sp *servicemap.ServicePort) { sp.ExternalIPs = addrs(ips...) }
}
func lbIPs(ips ...string) portOpt {
	return func(sp *servicemap.ServicePort) { sp.LoadBalancerIPs = addrs(ips...) }
}
func sourceRanges(rs ...string) portOpt {
	return func(sp *servicemap.ServicePort) { sp.LoadBalancerSourceRanges = prefixes(rs...) }
}
func affinity(d time.Duration) portOpt {
	return func(sp *servicemap.ServicePort) { sp.AffinityTimeout = d }
}
func internalLocal() portOpt {
	return func(sp *servicemap.ServicePort) { sp.InternalPolicyLocal = true }
}
func externalLocal(hc uint16) portOpt {
	return func(sp *servicemap.ServicePort) { sp.ExternalPolicyLocal, sp.HealthCheckNodePort = true, hc }
}
func endpoints(eps ...servicemap.Endpoint) portOpt {
	return func(sp *servicemap.ServicePort) { sp.Endpoints = eps }
}

type epOpt func(*servicemap.Endpoint)

// ep is a ready endpoint on another node.
func ep(addrPort string, opts ...epOpt) servicemap.Endpoint {
	ap := netip.MustParseAddrPort(addrPort)
	e := servicemap.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, NodeName: "node-b"}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func local(e *servicemap.Endpoint)       { e.IsLocal, e.NodeName = true, nodeName }
func terminating(e *servicemap.Endpoint) { e.Ready, e.Serving, e.Terminating = false, true, true }

func snapshot(ports ...*servicemap.ServicePort) *servicemap.Snapshot {
	return servicemap.NewSnapshot(1, &servicemap.NodeInfo{Name: nodeName}, ports...)
}

func mustBuild(t testing.TB, cfg Config, ports ...*servicemap.ServicePort) *State {
	t.Helper()
	st, err := Build(cfg, snapshot(ports...))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return st
}
