package rules

import (
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/servicemap"
)

// scenario is one configuration and set of service ports; the golden test
// renders it to testdata/<name>.golden and the kernel test installs it.
type scenario = testkit.Case[Config]

func scenarios() []scenario {
	return []scenario{
		{
			Name:   "clusterip-three-endpoints",
			Config: v4Config(),
			Ports:  []*servicemap.ServicePort{testkit.Port("default", "web", 80, "198.18.0.10", testkit.ThreeEndpoints())},
		},
		{
			Name:   "session-affinity",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "sticky", 443, "198.18.0.11",
				testkit.Affinity(3*time.Hour), testkit.NodePort(30443),
				testkit.Endpoints(testkit.EP("198.19.1.11:8443"), testkit.EP("198.19.1.12:8443", testkit.Local)))},
		},
		{
			Name:   "internal-policy-local",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{
				testkit.Port("default", "node-cache", 53, "198.18.0.12", testkit.Protocol(v1.ProtocolUDP), testkit.Named("dns"), testkit.InternalLocal(),
					testkit.Endpoints(testkit.EP("198.19.1.11:53"), testkit.EP("198.19.1.12:53", testkit.Local), testkit.EP("198.19.1.13:53"))),
				// No endpoint on this node: cluster IP traffic is dropped.
				testkit.Port("default", "elsewhere", 80, "198.18.0.13", testkit.InternalLocal(),
					testkit.Endpoints(testkit.EP("198.19.1.11:8080"))),
			},
		},
		{
			Name:   "external-policy-local-nodeport",
			Config: testkit.With(v4Config(), func(c *Config) { c.ClusterCIDRs = testkit.Prefixes("198.19.1.0/24") }),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "ingress", 80, "198.18.0.14",
				testkit.NodePort(30080), testkit.ExternalLocal(0),
				testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1.12:8080", testkit.Local)))},
		},
		{
			// --detect-local-mode=BridgeInterface: the detector is the
			// incoming interface (after -d in the masquerade rule, as
			// iptables-save prints it).
			Name:   "detect-local-bridge-interface",
			Config: testkit.With(v4Config(), func(c *Config) { c.BridgeInterface = "cbr0" }),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "ingress", 80, "198.18.0.14",
				testkit.NodePort(30080), testkit.ExternalLocal(0),
				testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1.12:8080", testkit.Local)))},
		},
		{
			Name:   "detect-local-interface-name-prefix",
			Config: testkit.With(v4Config(), func(c *Config) { c.InterfaceNamePrefix = "veth" }),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "ingress", 80, "198.18.0.14",
				testkit.NodePort(30080), testkit.ExternalLocal(0),
				testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1.12:8080", testkit.Local)))},
		},
		{
			Name:   "external-policy-local-no-local-endpoints",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "ingress", 80, "198.18.0.15",
				testkit.NodePort(30081), testkit.ExternalLocal(32000), testkit.ExternalIPs("198.18.100.1"), testkit.LoadBalancerIPs("198.18.200.1"),
				testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1.13:8080")))},
		},
		{
			Name:   "loadbalancer-source-ranges",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "api", 443, "198.18.0.16",
				testkit.NodePort(30443), testkit.LoadBalancerIPs("198.18.200.2"),
				// The first range holds the node's IP: the VIP itself is
				// then an allowed source too.
				testkit.SourceRanges("198.19.0.0/24", "203.0.113.0/25", "2001:db8::/64"),
				testkit.Endpoints(testkit.EP("198.19.1.11:8443"), testkit.EP("198.19.1.12:8443")))},
		},
		{
			Name:   "external-ips",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "public", 80, "198.18.0.17",
				testkit.ExternalIPs("198.18.100.2", "198.18.100.3", "fd00:18::100"), testkit.ThreeEndpoints())},
		},
		{
			Name:   "no-endpoints",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{
				testkit.Port("default", "empty", 80, "198.18.0.18", testkit.NodePort(30082), testkit.ExternalIPs("198.18.100.4"),
					testkit.LoadBalancerIPs("198.18.200.3"), testkit.SourceRanges("203.0.113.0/25")),
				// Not ready and not serving counts as none.
				testkit.Port("default", "down", 80, "198.18.0.19", testkit.Endpoints(testkit.EP("198.19.1.11:8080", testkit.Gone))),
			},
		},
		{
			Name:   "terminating-only",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "draining", 80, "198.18.0.20", testkit.NodePort(30083),
				testkit.ExternalLocal(0),
				testkit.Endpoints(testkit.EP("198.19.1.11:8080", testkit.Terminating), testkit.EP("198.19.1.12:8080", testkit.Terminating, testkit.Local),
					testkit.EP("198.19.1.13:8080", testkit.Gone, testkit.Local)))},
		},
		{
			Name:   "masquerade-all",
			Config: testkit.With(v4Config(), func(c *Config) { c.MasqueradeAll, c.RandomFully = true, true }),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "web", 80, "198.18.0.10", testkit.NodePort(30084),
				testkit.ThreeEndpoints())},
		},
		{
			Name: "cluster-cidr",
			Config: testkit.With(v4Config(), func(c *Config) {
				// Only the first range of the family is used, as in kube-proxy.
				c.ClusterCIDRs = testkit.Prefixes("198.19.1.0/24", "198.19.2.0/24")
			}),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "web", 80, "198.18.0.10", testkit.ExternalIPs("198.18.100.5"),
				testkit.ExternalLocal(0), testkit.ThreeEndpoints())},
		},
		{
			Name: "nodeport-addresses",
			Config: testkit.With(v4Config(), func(c *Config) {
				c.NodePortAddresses = testkit.Prefixes("198.19.0.0/24", "127.0.0.0/8")
				c.InterfaceAddrs = testkit.Addrs("198.19.9.1", "198.19.0.1", "127.0.0.1", "198.19.0.7")
				c.LocalhostNodePorts = true
			}),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "web", 80, "198.18.0.10", testkit.NodePort(30085),
				testkit.ThreeEndpoints())},
		},
		{
			Name: "localhost-nodeports",
			Config: testkit.With(v4Config(), func(c *Config) {
				c.LocalhostNodePorts, c.ConntrackTCPBeLiberal, c.MasqueradeBit = true, true, 31
			}),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "web", 80, "198.18.0.10", testkit.NodePort(30086),
				testkit.ThreeEndpoints())},
		},
		{
			Name: "ipv6",
			Config: testkit.With(v6Config(), func(c *Config) {
				c.ClusterCIDRs = testkit.Prefixes("fd00:19:1::/64")
				c.NodePortAddresses = testkit.Prefixes("fd00:19::/64", "::1/128")
				c.InterfaceAddrs = testkit.Addrs("::1", "fd00:19::1", "fe80::1")
				c.LocalhostNodePorts = true // never applies to IPv6
			}),
			Ports: []*servicemap.ServicePort{
				testkit.Port("default", "dual", 80, "198.18.0.21,fd00:18::21", testkit.Affinity(10*time.Minute),
					testkit.NodePort(30087), testkit.LoadBalancerIPs("198.18.200.4", "fd00:18::200:4"),
					testkit.SourceRanges("203.0.113.0/25", "fd00:19::/64"), testkit.ExternalIPs("fd00:18::100:1"),
					testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("[fd00:19:1::11]:8080"), testkit.EP("[fd00:19:1::12]:8080", testkit.Local))),
				testkit.Port("default", "v6-empty", 80, "fd00:18::22", testkit.Protocol(v1.ProtocolUDP)),
				// No IPv6 cluster IP: nothing in the IPv6 tables.
				testkit.Port("default", "v4-only", 80, "198.18.0.23", testkit.ThreeEndpoints()),
			},
		},
		{
			Name:   "udp-and-sctp",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{
				testkit.Port("kube-system", "dns", 53, "198.18.0.53", testkit.Protocol(v1.ProtocolUDP), testkit.Named("dns"),
					testkit.Endpoints(testkit.EP("198.19.1.21:53"), testkit.EP("198.19.1.22:53"))),
				testkit.Port("kube-system", "dns", 53, "198.18.0.53", testkit.Protocol(v1.ProtocolTCP), testkit.Named("dns-tcp"),
					testkit.Endpoints(testkit.EP("198.19.1.21:53"), testkit.EP("198.19.1.22:53"))),
				testkit.Port("telecom", "signalling", 3868, "198.18.0.24", testkit.Protocol(v1.ProtocolSCTP), testkit.Named(""),
					testkit.NodePort(30868), testkit.Endpoints(testkit.EP("198.19.1.31:3868"), testkit.EP("198.19.1.32:3868"))),
				testkit.Port("telecom", "idle", 2905, "198.18.0.25", testkit.Protocol(v1.ProtocolSCTP)),
			},
		},
		{
			Name:   "topology-hints",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "zonal", 80, "198.18.0.26", testkit.NodePort(30088),
				testkit.Endpoints(testkit.EP("198.19.1.11:8080", testkit.ZoneHints("zone-a")), testkit.EP("198.19.1.12:8080", testkit.ZoneHints("zone-b")),
					testkit.EP("198.19.1.13:8080", testkit.ZoneHints("zone-a"))))},
		},
		{
			Name:   "large-cluster",
			Config: testkit.With(v4Config(), func(c *Config) { c.LargeCluster = true }),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "sticky", 80, "198.18.0.28", testkit.Affinity(time.Hour),
				testkit.NodePort(30089), testkit.ThreeEndpoints())},
		},
		{
			Name:   "many-endpoints",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "wide", 80, "198.18.0.27",
				testkit.Endpoints(manyEndpoints(12)...))},
		},
	}
}

// manyEndpoints returns n ready endpoints 198.19.1.1:8080 onwards.
func manyEndpoints(n int) []servicemap.Endpoint {
	var eps []servicemap.Endpoint
	for i := range n {
		addr := netip.AddrFrom4([4]byte{198, 19, 1, byte(i + 1)})
		eps = append(eps, testkit.EP(netip.AddrPortFrom(addr, 8080).String()))
	}
	return eps
}
