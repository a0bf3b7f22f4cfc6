package rules

import (
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Fixtures come from bench/testkit: service VIPs in 198.18.0.0/16, the node
// and pods in 198.19.0.0/16 (pods in 198.19.1.0/24), IPv6 under fd00::.

// nodeConfig is the rule model's configuration on testkit's node in fam.
func nodeConfig(fam ipfamily.Family) Config {
	return Config{Family: fam, MasqueradeBit: 14, NodeIPs: []netip.Addr{testkit.NodeIP(fam)}, Topology: testkit.Topology()}
}

func v4Config() Config { return nodeConfig(ipfamily.IPv4) }
func v6Config() Config { return nodeConfig(ipfamily.IPv6) }

func mustBuilder(t testing.TB, cfg Config) *Builder {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

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
