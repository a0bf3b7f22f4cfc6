package rules

import (
	"testing"
	"time"
)

// BenchmarkForPort builds a typical LoadBalancer port with 10 endpoints,
// ClientIP affinity and a cluster CIDR: the mode calls ForPort for every
// port (30,000 on a large cluster) at start and for each changed port on a
// partial sync.
func BenchmarkForPort(b *testing.B) {
	builder := mustBuilder(b, with(v4Config(), func(c *Config) { c.ClusterCIDRs = prefixes("198.19.1.0/24") }))
	sp := servicePort("default", "web", 80, "198.18.0.10", nodePort(30080), loadBalancerIPs("198.18.200.1"),
		affinity(time.Hour), endpoints(manyEndpoints(10)...))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := builder.ForPort(sp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForPortClusterIP is the common case: a ClusterIP port, 10
// endpoints, no affinity.
func BenchmarkForPortClusterIP(b *testing.B) {
	builder := mustBuilder(b, v4Config())
	sp := servicePort("default", "web", 80, "198.18.0.10", endpoints(manyEndpoints(10)...))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := builder.ForPort(sp); err != nil {
			b.Fatal(err)
		}
	}
}
