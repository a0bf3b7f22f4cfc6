package rules

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

// Test fixtures: service VIPs in 198.18.0.0/16, the node and pods in
// 198.19.0.0/16 (pods in 198.19.1.0/24), IPv6 under fd00::.
const (
	nodeName = "node-a"
	nodeIPv4 = "198.19.0.1"
	nodeIPv6 = "fd00:19::1"
)

func v4Config() Config {
	return Config{
		Family:        kernel.IPv4,
		MasqueradeBit: 14,
		NodeIPs:       []netip.Addr{netip.MustParseAddr(nodeIPv4)},
		Topology:      servicemap.Topology{NodeName: nodeName, Zone: "zone-a"},
	}
}

func v6Config() Config {
	return Config{
		Family:        kernel.IPv6,
		MasqueradeBit: 14,
		NodeIPs:       []netip.Addr{netip.MustParseAddr(nodeIPv6)},
		Topology:      servicemap.Topology{NodeName: nodeName, Zone: "zone-a"},
	}
}

func mustBuilder(t testing.TB, cfg Config) *Builder {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

func spn(ns, name, port string, proto v1.Protocol) servicemap.ServicePortName {
	return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

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

// portOpt changes a test service port.
type portOpt func(*servicemap.ServicePort)

// servicePort returns a port named "ns/name:http" (TCP unless changed)
// with the given cluster IPs.
func servicePort(ns, name string, port uint16, clusterIPs string, opts ...portOpt) *servicemap.ServicePort {
	sp := &servicemap.ServicePort{
		Name:       spn(ns, name, "http", v1.ProtocolTCP),
		ClusterIPs: addrs(strings.Split(clusterIPs, ",")...),
		Port:       port,
	}
	for _, o := range opts {
		o(sp)
	}
	return sp
}

func protocol(p v1.Protocol) portOpt {
	return func(sp *servicemap.ServicePort) { sp.Name.Protocol = p }
}
func portName(n string) portOpt { return func(sp *servicemap.ServicePort) { sp.Name.Port = n } }
func nodePort(p uint16) portOpt { return func(sp *servicemap.ServicePort) { sp.NodePort = p } }
func externalIPs(ips ...string) portOpt {
	return func(sp *servicemap.ServicePort) { sp.ExternalIPs = addrs(ips...) }
}
func loadBalancerIPs(ips ...string) portOpt {
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

// externalLocal sets externalTrafficPolicy Local, with a health-check node
// port when hc is not 0 (a LoadBalancer).
func externalLocal(hc uint16) portOpt {
	return func(sp *servicemap.ServicePort) { sp.ExternalPolicyLocal, sp.HealthCheckNodePort = true, hc }
}
func endpoints(eps ...servicemap.Endpoint) portOpt {
	return func(sp *servicemap.ServicePort) { sp.Endpoints = eps }
}

// epOpt changes a test endpoint.
type epOpt func(*servicemap.Endpoint)

// ep returns a ready endpoint on another node.
func ep(addrPort string, opts ...epOpt) servicemap.Endpoint {
	ap := netip.MustParseAddrPort(addrPort)
	e := servicemap.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, NodeName: "node-b"}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func local(e *servicemap.Endpoint) { e.IsLocal, e.NodeName = true, nodeName }

// terminating: still serving while its pod shuts down.
func terminating(e *servicemap.Endpoint) { e.Ready, e.Serving, e.Terminating = false, true, true }

// gone: terminating and no longer serving.
func gone(e *servicemap.Endpoint) { e.Ready, e.Serving, e.Terminating = false, false, true }

func zoneHints(zones ...string) epOpt { return func(e *servicemap.Endpoint) { e.ZoneHints = zones } }

// mustPorts builds every port's rules.
func mustPorts(t testing.TB, b *Builder, sps ...*servicemap.ServicePort) []PortRules {
	t.Helper()
	var out []PortRules
	for _, sp := range sps {
		pr, err := b.ForPort(sp)
		if err != nil {
			t.Fatalf("ForPort(%s): %v", sp.Name, err)
		}
		out = append(out, pr)
	}
	return out
}
