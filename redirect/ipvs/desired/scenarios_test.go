package desired

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/servicemap"
)

// scenario is a configuration and a set of ports; TestGolden dumps each to
// testdata/<name>.golden.
type scenario struct {
	name  string
	cfg   Config
	ports []*servicemap.ServicePort
}

func threeEndpoints() portOpt {
	return endpoints(ep("198.19.1.11:8080"), ep("198.19.1.12:8080"), ep("198.19.1.13:8080"))
}

func scenarios() []scenario {
	return []scenario{
		{name: "empty", cfg: v4Config()},
		{
			name:  "clusterip-three-endpoints",
			cfg:   v4Config(),
			ports: []*servicemap.ServicePort{port("default", "web", 80, "198.18.0.10", threeEndpoints())},
		},
		{
			name: "affinity-nodeport-local-endpoint",
			cfg:  with(v4Config(), func(c *Config) { c.ClusterCIDRs = prefixes("198.19.1.0/24") }),
			ports: []*servicemap.ServicePort{port("default", "sticky", 443, "198.18.0.11", affinity(3*time.Hour), nodePort(30443),
				endpoints(ep("198.19.1.11:8443"), ep("198.19.1.12:8443", local)))},
		},
		{
			name: "udp-sctp-nodeports-restricted-addresses",
			cfg: with(v4Config(), func(c *Config) {
				c.LocalAddrs = addrs("127.0.0.1", "198.19.0.1", "198.19.2.1")
				c.NodePortAddresses = prefixes("198.19.0.0/24", "127.0.0.0/8")
			}),
			ports: []*servicemap.ServicePort{
				port("default", "dns", 53, "198.18.0.12", protocol(v1.ProtocolUDP), nodePort(30053),
					endpoints(ep("198.19.1.11:5353"))),
				port("default", "sig", 3868, "198.18.0.13", protocol(v1.ProtocolSCTP), nodePort(30868), externalLocal(0),
					endpoints(ep("198.19.1.12:3868", local))),
			},
		},
		{
			name: "external-and-lb-policy-local",
			cfg:  with(v4Config(), func(c *Config) { c.MasqueradeAll = true; c.RandomFully = true }),
			ports: []*servicemap.ServicePort{port("default", "ingress", 80, "198.18.0.14",
				nodePort(30080), externalLocal(32000), externalIPs("198.18.100.1", "198.19.0.1"), lbIPs("198.18.200.1"),
				endpoints(ep("198.19.1.11:8080"), ep("198.19.1.12:8080", local)))},
		},
		{
			name: "loadbalancer-source-ranges",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{
				// The node's address is in range: the VIP is an allowed source.
				port("default", "api", 443, "198.18.0.16", lbIPs("198.18.200.2"),
					sourceRanges("198.19.0.0/24", "203.0.113.0/25", "2001:db8::/64"),
					endpoints(ep("198.19.1.11:8443"))),
				// It is not: the node is kept out.
				port("default", "private", 443, "198.18.0.17", lbIPs("198.18.200.3"),
					sourceRanges("203.0.113.0/25"), endpoints(ep("198.19.1.12:8443"))),
			},
		},
		{
			name: "terminating-fallback-and-internal-local",
			cfg:  with(v4Config(), func(c *Config) { c.Scheduler = "mh"; c.StrictARP = true }),
			ports: []*servicemap.ServicePort{
				port("default", "draining", 80, "198.18.0.18",
					endpoints(ep("198.19.1.11:8080", terminating), ep("198.19.1.12:8080", terminating))),
				port("default", "node-cache", 53, "198.18.0.19", protocol(v1.ProtocolUDP), internalLocal(),
					endpoints(ep("198.19.1.11:53"), ep("198.19.1.12:53", local))),
			},
		},
		{
			name: "ipv6-dual-stack-port",
			cfg:  v6Config(),
			ports: []*servicemap.ServicePort{
				port("default", "web", 80, "198.18.0.20,fd00:18::20", nodePort(30081), lbIPs("198.18.200.4", "fd00:18::200"),
					endpoints(ep("198.19.1.11:8080"), ep("[fd00:19:1::11]:8080", local))),
				// IPv4 only: not in the IPv6 state.
				port("default", "v4only", 80, "198.18.0.21", endpoints(ep("198.19.1.11:8080"))),
			},
		},
		{
			name: "conflicting-external-ip",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{
				port("a", "first", 80, "198.18.0.22", externalIPs("198.18.100.9"), endpoints(ep("198.19.1.11:8080"))),
				port("b", "second", 80, "198.18.0.23", externalIPs("198.18.100.9"), endpoints(ep("198.19.1.12:8080"))),
			},
		},
	}
}
