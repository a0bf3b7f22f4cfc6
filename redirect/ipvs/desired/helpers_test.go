package desired

import (
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Fixtures come from bench/testkit: VIPs in 198.18.0.0/16, node and pods in
// 198.19.0.0/16 (pods in 198.19.1.0/24), IPv6 under fd00::.

func v4Config() Config {
	return Config{
		Family:        kernel.IPv4,
		MasqueradeBit: 14,
		LocalAddrs:    testkit.Addrs("127.0.0.1", testkit.NodeIPv4),
		NodeIPs:       testkit.Addrs(testkit.NodeIPv4),
		Topology:      servicemap.Topology{NodeName: testkit.NodeName, Zone: testkit.Zone},
	}
}

func v6Config() Config {
	return Config{
		Family:        kernel.IPv6,
		MasqueradeBit: 14,
		LocalAddrs:    testkit.Addrs("::1", testkit.NodeIPv6),
		NodeIPs:       testkit.Addrs(testkit.NodeIPv6),
		Topology:      servicemap.Topology{NodeName: testkit.NodeName, Zone: testkit.Zone},
	}
}

func with(c Config, change func(*Config)) Config { change(&c); return c }

func mustBuild(t testing.TB, cfg Config, ports ...*servicemap.ServicePort) *State {
	t.Helper()
	st, err := Build(cfg, testkit.Snapshot(ports...))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return st
}
