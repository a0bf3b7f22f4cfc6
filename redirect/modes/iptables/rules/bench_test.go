package rules

import (
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/testkit"
)

// BenchmarkForPort builds a typical LoadBalancer port with 10 endpoints,
// ClientIP affinity and a cluster CIDR: the mode calls ForPort for every
// port (30,000 on a large cluster) at start and for each changed port on a
// partial sync.
func BenchmarkForPort(b *testing.B) {
	builder := mustBuilder(b, testkit.With(v4Config(), func(c *Config) { c.ClusterCIDRs = testkit.Prefixes("198.19.1.0/24") }))
	sp := testkit.Port("default", "web", 80, "198.18.0.10", testkit.NodePort(30080), testkit.LoadBalancerIPs("198.18.200.1"),
		testkit.Affinity(time.Hour), testkit.Endpoints(manyEndpoints(10)...))
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
	sp := testkit.Port("default", "web", 80, "198.18.0.10", testkit.Endpoints(manyEndpoints(10)...))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := builder.ForPort(sp); err != nil {
			b.Fatal(err)
		}
	}
}
