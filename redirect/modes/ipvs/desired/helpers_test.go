package desired

import (
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Fixtures come from bench/testkit: VIPs in 198.18.0.0/16, node and pods in
// 198.19.0.0/16 (pods in 198.19.1.0/24), IPv6 under fd00::.

// nodeConfig is the desired state's configuration on testkit's node in
// fam, whose local addresses are loopback and the node's address.
func nodeConfig(fam ipfamily.Family) Config {
	loopback := netip.MustParseAddr("127.0.0.1")
	if fam == ipfamily.IPv6 {
		loopback = netip.IPv6Loopback()
	}
	node := testkit.NodeIP(fam)
	return Config{Family: fam, MasqueradeBit: 14, LocalAddrs: []netip.Addr{loopback, node}, NodeIPs: []netip.Addr{node},
		Topology: testkit.Topology()}
}

func v4Config() Config { return nodeConfig(ipfamily.IPv4) }
func v6Config() Config { return nodeConfig(ipfamily.IPv6) }

func mustBuild(t testing.TB, cfg Config, ports ...*servicemap.ServicePort) *State {
	t.Helper()
	st, err := Build(cfg, testkit.Snapshot(ports...))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return st
}
