package nftables

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/redirect/modes/nftables/rules"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestCatalogue renders every scenario of the shared catalogue with one
// full sync into a knftables fake, per family, and compares the table's
// dump with testdata/scenarios/<name>.golden (KPROXY_UPDATE_GOLDEN=1
// rewrites them).
func TestCatalogue(t *testing.T) {
	catalogue.RenderEach(t, func(t *testing.T, snap *servicemap.Snapshot, fam ipfamily.Family) string {
		fake := fakeFor(fam)
		m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: fake})
		mustSync(t, m, snap, full())
		return "# " + string(fam) + " table\n" + fake.Dump()
	})
}

// TestConfigGolden renders one snapshot (a ClusterIP service and a
// LoadBalancer with externalTrafficPolicy Local, source ranges and a local
// endpoint) under each configuration the flags can give, per family, into
// testdata/config/<name>.golden.
func TestConfigGolden(t *testing.T) {
	ports := []*servicemap.ServicePort{
		testkit.Port("ns", "web", 80, "198.18.0.10,fd00:18::10", testkit.ThreeEndpoints()),
		testkit.Port("ns", "lb", 443, "198.18.0.11,fd00:18::11", testkit.NodePort(30443), testkit.ExternalLocal(31000),
			testkit.LoadBalancerIPs("198.18.200.1", "fd00:18:200::1"), testkit.SourceRanges("198.19.0.0/24", "fd00:19::/64"),
			testkit.Endpoints(testkit.EP("198.19.1.11:8443", testkit.Local), testkit.EP("[fd00:19:1::11]:8443", testkit.Local))),
	}
	for _, tc := range []struct {
		name   string
		change func(*rules.Config)
		policy nodeaddr.Policy
		cidrs  bool
	}{
		{name: "cluster-cidr", change: func(*rules.Config) {}, policy: testPolicy()},
		{name: "no-detector", change: func(c *rules.Config) { c.ClusterCIDRs = nil }, policy: testPolicy()},
		{name: "bridge-interface", change: func(c *rules.Config) { c.ClusterCIDRs, c.BridgeInterface = nil, "cbr0" }, policy: testPolicy()},
		{name: "interface-name-prefix", change: func(c *rules.Config) { c.ClusterCIDRs, c.InterfaceNamePrefix = nil, "veth" }, policy: testPolicy()},
		{name: "masquerade-all", change: func(c *rules.Config) { c.MasqueradeAll = true }, policy: testPolicy()},
		{name: "masquerade-bit", change: func(c *rules.Config) { c.MasqueradeBit = 5 }, policy: testPolicy()},
		{name: "nodeport-addresses-all", change: func(*rules.Config) {}, policy: nodeaddr.Policy{}},
		{name: "service-cidrs", change: func(*rules.Config) {}, policy: testPolicy(), cidrs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sb strings.Builder
			for _, fam := range ipfamily.All() {
				fake := fakeFor(fam)
				rc := testRulesConfig(fam)
				tc.change(&rc)
				m, err := New(Config{Families: []FamilyConfig{{Rules: rc, NFT: fake}}, NodeName: testkit.NodeName,
					NodePorts: tc.policy, LocalAddresses: localAddrs, Logger: klog.Background()})
				if err != nil {
					t.Fatal(err)
				}
				snap := snapshotIn(1, nodeState{zone: "zone-a", serviceCIDRs: tc.cidrs}, ports...)
				mustSync(t, m, snap, full())
				sb.WriteString("# " + string(fam) + " table\n" + fake.Dump() + "\n")
			}
			testkit.Golden(t, filepath.Join("testdata", "config", tc.name+".golden"), sb.String())
		})
	}
}
