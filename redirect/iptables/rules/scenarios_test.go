package rules

import (
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/servicemap"
)

// scenario is one configuration and set of service ports; the golden test
// renders it to testdata/<name>.golden and the kernel test installs it.
type scenario struct {
	name  string
	cfg   Config
	ports []*servicemap.ServicePort
}

func with(cfg Config, change func(*Config)) Config {
	change(&cfg)
	return cfg
}

// three ready endpoints on other nodes.
func threeEndpoints() portOpt {
	return endpoints(ep("198.19.1.11:8080"), ep("198.19.1.12:8080"), ep("198.19.1.13:8080"))
}

func scenarios() []scenario {
	return []scenario{
		{
			name:  "clusterip-three-endpoints",
			cfg:   v4Config(),
			ports: []*servicemap.ServicePort{servicePort("default", "web", 80, "198.18.0.10", threeEndpoints())},
		},
		{
			name: "session-affinity",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{servicePort("default", "sticky", 443, "198.18.0.11",
				affinity(3*time.Hour), nodePort(30443),
				endpoints(ep("198.19.1.11:8443"), ep("198.19.1.12:8443", local)))},
		},
		{
			name: "internal-policy-local",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{
				servicePort("default", "node-cache", 53, "198.18.0.12", protocol(v1.ProtocolUDP), portName("dns"), internalLocal(),
					endpoints(ep("198.19.1.11:53"), ep("198.19.1.12:53", local), ep("198.19.1.13:53"))),
				// No endpoint on this node: cluster IP traffic is dropped.
				servicePort("default", "elsewhere", 80, "198.18.0.13", internalLocal(),
					endpoints(ep("198.19.1.11:8080"))),
			},
		},
		{
			name: "external-policy-local-nodeport",
			cfg:  with(v4Config(), func(c *Config) { c.ClusterCIDRs = prefixes("198.19.1.0/24") }),
			ports: []*servicemap.ServicePort{servicePort("default", "ingress", 80, "198.18.0.14",
				nodePort(30080), externalLocal(0),
				endpoints(ep("198.19.1.11:8080"), ep("198.19.1.12:8080", local)))},
		},
		{
			name: "external-policy-local-no-local-endpoints",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{servicePort("default", "ingress", 80, "198.18.0.15",
				nodePort(30081), externalLocal(32000), externalIPs("198.18.100.1"), loadBalancerIPs("198.18.200.1"),
				endpoints(ep("198.19.1.11:8080"), ep("198.19.1.13:8080")))},
		},
		{
			name: "loadbalancer-source-ranges",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{servicePort("default", "api", 443, "198.18.0.16",
				nodePort(30443), loadBalancerIPs("198.18.200.2"),
				// The first range holds the node's IP: the VIP itself is
				// then an allowed source too.
				sourceRanges("198.19.0.0/24", "203.0.113.0/25", "2001:db8::/64"),
				endpoints(ep("198.19.1.11:8443"), ep("198.19.1.12:8443")))},
		},
		{
			name: "external-ips",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{servicePort("default", "public", 80, "198.18.0.17",
				externalIPs("198.18.100.2", "198.18.100.3", "fd00:18::100"), threeEndpoints())},
		},
		{
			name: "no-endpoints",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{
				servicePort("default", "empty", 80, "198.18.0.18", nodePort(30082), externalIPs("198.18.100.4"),
					loadBalancerIPs("198.18.200.3"), sourceRanges("203.0.113.0/25")),
				// Not ready and not serving counts as none.
				servicePort("default", "down", 80, "198.18.0.19", endpoints(ep("198.19.1.11:8080", gone))),
			},
		},
		{
			name: "terminating-only",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{servicePort("default", "draining", 80, "198.18.0.20", nodePort(30083),
				externalLocal(0),
				endpoints(ep("198.19.1.11:8080", terminating), ep("198.19.1.12:8080", terminating, local),
					ep("198.19.1.13:8080", gone, local)))},
		},
		{
			name: "masquerade-all",
			cfg:  with(v4Config(), func(c *Config) { c.MasqueradeAll, c.RandomFully = true, true }),
			ports: []*servicemap.ServicePort{servicePort("default", "web", 80, "198.18.0.10", nodePort(30084),
				threeEndpoints())},
		},
		{
			name: "cluster-cidr",
			cfg: with(v4Config(), func(c *Config) {
				// Only the first range of the family is used, as in kube-proxy.
				c.ClusterCIDRs = prefixes("198.19.1.0/24", "198.19.2.0/24")
			}),
			ports: []*servicemap.ServicePort{servicePort("default", "web", 80, "198.18.0.10", externalIPs("198.18.100.5"),
				externalLocal(0), threeEndpoints())},
		},
		{
			name: "nodeport-addresses",
			cfg: with(v4Config(), func(c *Config) {
				c.NodePortAddresses = prefixes("198.19.0.0/24", "127.0.0.0/8")
				c.InterfaceAddrs = addrs("198.19.9.1", "198.19.0.1", "127.0.0.1", "198.19.0.7")
				c.LocalhostNodePorts = true
			}),
			ports: []*servicemap.ServicePort{servicePort("default", "web", 80, "198.18.0.10", nodePort(30085),
				threeEndpoints())},
		},
		{
			name: "localhost-nodeports",
			cfg: with(v4Config(), func(c *Config) {
				c.LocalhostNodePorts, c.ConntrackTCPBeLiberal, c.MasqueradeBit = true, true, 31
			}),
			ports: []*servicemap.ServicePort{servicePort("default", "web", 80, "198.18.0.10", nodePort(30086),
				threeEndpoints())},
		},
		{
			name: "ipv6",
			cfg: with(v6Config(), func(c *Config) {
				c.ClusterCIDRs = prefixes("fd00:19:1::/64")
				c.NodePortAddresses = prefixes("fd00:19::/64", "::1/128")
				c.InterfaceAddrs = addrs("::1", "fd00:19::1", "fe80::1")
				c.LocalhostNodePorts = true // never applies to IPv6
			}),
			ports: []*servicemap.ServicePort{
				servicePort("default", "dual", 80, "198.18.0.21,fd00:18::21", affinity(10*time.Minute),
					nodePort(30087), loadBalancerIPs("198.18.200.4", "fd00:18::200:4"),
					sourceRanges("203.0.113.0/25", "fd00:19::/64"), externalIPs("fd00:18::100:1"),
					endpoints(ep("198.19.1.11:8080"), ep("[fd00:19:1::11]:8080"), ep("[fd00:19:1::12]:8080", local))),
				servicePort("default", "v6-empty", 80, "fd00:18::22", protocol(v1.ProtocolUDP)),
				// No IPv6 cluster IP: nothing in the IPv6 tables.
				servicePort("default", "v4-only", 80, "198.18.0.23", threeEndpoints()),
			},
		},
		{
			name: "udp-and-sctp",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{
				servicePort("kube-system", "dns", 53, "198.18.0.53", protocol(v1.ProtocolUDP), portName("dns"),
					endpoints(ep("198.19.1.21:53"), ep("198.19.1.22:53"))),
				servicePort("kube-system", "dns", 53, "198.18.0.53", protocol(v1.ProtocolTCP), portName("dns-tcp"),
					endpoints(ep("198.19.1.21:53"), ep("198.19.1.22:53"))),
				servicePort("telecom", "signalling", 3868, "198.18.0.24", protocol(v1.ProtocolSCTP), portName(""),
					nodePort(30868), endpoints(ep("198.19.1.31:3868"), ep("198.19.1.32:3868"))),
				servicePort("telecom", "idle", 2905, "198.18.0.25", protocol(v1.ProtocolSCTP)),
			},
		},
		{
			name: "topology-hints",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{servicePort("default", "zonal", 80, "198.18.0.26", nodePort(30088),
				endpoints(ep("198.19.1.11:8080", zoneHints("zone-a")), ep("198.19.1.12:8080", zoneHints("zone-b")),
					ep("198.19.1.13:8080", zoneHints("zone-a"))))},
		},
		{
			name: "large-cluster",
			cfg:  with(v4Config(), func(c *Config) { c.LargeCluster = true }),
			ports: []*servicemap.ServicePort{servicePort("default", "sticky", 80, "198.18.0.28", affinity(time.Hour),
				nodePort(30089), threeEndpoints())},
		},
		{
			name: "many-endpoints",
			cfg:  v4Config(),
			ports: []*servicemap.ServicePort{servicePort("default", "wide", 80, "198.18.0.27",
				endpoints(manyEndpoints(12)...))},
		},
	}
}

// manyEndpoints returns n ready endpoints 198.19.1.1:8080 onwards.
func manyEndpoints(n int) []servicemap.Endpoint {
	var eps []servicemap.Endpoint
	for i := range n {
		addr := netip.AddrFrom4([4]byte{198, 19, 1, byte(i + 1)})
		eps = append(eps, ep(netip.AddrPortFrom(addr, 8080).String()))
	}
	return eps
}
