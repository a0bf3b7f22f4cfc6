package desired

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/servicemap"
)

// scenario is a configuration and a set of ports; TestGolden dumps each to
// testdata/<name>.golden.
type scenario = testkit.Case[Config]

func scenarios() []scenario {
	return []scenario{
		{Name: "empty", Config: v4Config()},
		{
			Name:   "clusterip-three-endpoints",
			Config: v4Config(),
			Ports:  []*servicemap.ServicePort{testkit.Port("default", "web", 80, "198.18.0.10", testkit.ThreeEndpoints())},
		},
		{
			// --detect-local-mode=BridgeInterface and InterfaceNamePrefix:
			// cluster IP traffic not coming in on the pods' interfaces is
			// masqueraded.
			Name:   "detect-local-bridge-interface",
			Config: testkit.With(v4Config(), func(c *Config) { c.BridgeInterface = "cbr0" }),
			Ports:  []*servicemap.ServicePort{testkit.Port("default", "web", 80, "198.18.0.10", testkit.ThreeEndpoints())},
		},
		{
			Name:   "detect-local-interface-name-prefix",
			Config: testkit.With(v4Config(), func(c *Config) { c.InterfaceNamePrefix = "veth" }),
			Ports:  []*servicemap.ServicePort{testkit.Port("default", "web", 80, "198.18.0.10", testkit.ThreeEndpoints())},
		},
		{
			Name:   "affinity-nodeport-local-endpoint",
			Config: testkit.With(v4Config(), func(c *Config) { c.ClusterCIDRs = testkit.Prefixes("198.19.1.0/24") }),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "sticky", 443, "198.18.0.11", testkit.Affinity(3*time.Hour), testkit.NodePort(30443),
				testkit.Endpoints(testkit.EP("198.19.1.11:8443"), testkit.EP("198.19.1.12:8443", testkit.Local)))},
		},
		{
			Name: "udp-sctp-nodeports-restricted-addresses",
			Config: testkit.With(v4Config(), func(c *Config) {
				c.LocalAddrs = testkit.Addrs("127.0.0.1", "198.19.0.1", "198.19.2.1")
				c.NodePortAddresses = testkit.Prefixes("198.19.0.0/24", "127.0.0.0/8")
			}),
			Ports: []*servicemap.ServicePort{
				testkit.Port("default", "dns", 53, "198.18.0.12", testkit.Protocol(v1.ProtocolUDP), testkit.NodePort(30053),
					testkit.Endpoints(testkit.EP("198.19.1.11:5353"))),
				testkit.Port("default", "sig", 3868, "198.18.0.13", testkit.Protocol(v1.ProtocolSCTP), testkit.NodePort(30868), testkit.ExternalLocal(0),
					testkit.Endpoints(testkit.EP("198.19.1.12:3868", testkit.Local))),
			},
		},
		{
			Name:   "external-and-lb-policy-local",
			Config: testkit.With(v4Config(), func(c *Config) { c.MasqueradeAll = true; c.RandomFully = true }),
			Ports: []*servicemap.ServicePort{testkit.Port("default", "ingress", 80, "198.18.0.14",
				testkit.NodePort(30080), testkit.ExternalLocal(32000), testkit.ExternalIPs("198.18.100.1", "198.19.0.1"), testkit.LoadBalancerIPs("198.18.200.1"),
				testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1.12:8080", testkit.Local)))},
		},
		{
			Name:   "loadbalancer-source-ranges",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{
				// The node's address is in range: the VIP is an allowed source.
				testkit.Port("default", "api", 443, "198.18.0.16", testkit.LoadBalancerIPs("198.18.200.2"),
					testkit.SourceRanges("198.19.0.0/24", "203.0.113.0/25", "2001:db8::/64"),
					testkit.Endpoints(testkit.EP("198.19.1.11:8443"))),
				// It is not: the node is kept out.
				testkit.Port("default", "private", 443, "198.18.0.17", testkit.LoadBalancerIPs("198.18.200.3"),
					testkit.SourceRanges("203.0.113.0/25"), testkit.Endpoints(testkit.EP("198.19.1.12:8443"))),
			},
		},
		{
			Name:   "terminating-fallback-and-internal-local",
			Config: testkit.With(v4Config(), func(c *Config) { c.Scheduler = "mh"; c.StrictARP = true }),
			Ports: []*servicemap.ServicePort{
				testkit.Port("default", "draining", 80, "198.18.0.18",
					testkit.Endpoints(testkit.EP("198.19.1.11:8080", testkit.Terminating), testkit.EP("198.19.1.12:8080", testkit.Terminating))),
				testkit.Port("default", "node-cache", 53, "198.18.0.19", testkit.Protocol(v1.ProtocolUDP), testkit.InternalLocal(),
					testkit.Endpoints(testkit.EP("198.19.1.11:53"), testkit.EP("198.19.1.12:53", testkit.Local))),
			},
		},
		{
			Name:   "ipv6-dual-stack-port",
			Config: v6Config(),
			Ports: []*servicemap.ServicePort{
				testkit.Port("default", "web", 80, "198.18.0.20,fd00:18::20", testkit.NodePort(30081), testkit.LoadBalancerIPs("198.18.200.4", "fd00:18::200"),
					testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("[fd00:19:1::11]:8080", testkit.Local))),
				// IPv4 only: not in the IPv6 state.
				testkit.Port("default", "v4only", 80, "198.18.0.21", testkit.Endpoints(testkit.EP("198.19.1.11:8080"))),
			},
		},
		{
			Name:   "conflicting-external-ip",
			Config: v4Config(),
			Ports: []*servicemap.ServicePort{
				testkit.Port("a", "first", 80, "198.18.0.22", testkit.ExternalIPs("198.18.100.9"), testkit.Endpoints(testkit.EP("198.19.1.11:8080"))),
				testkit.Port("b", "second", 80, "198.18.0.23", testkit.ExternalIPs("198.18.100.9"), testkit.Endpoints(testkit.EP("198.19.1.12:8080"))),
			},
		},
	}
}
