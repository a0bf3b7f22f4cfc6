package nftables

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/modes/nftables/rules"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// testClock is a settable clock for deferred chain deletion.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

// fakeFor returns a knftables fake for fam's table.
func fakeFor(fam ipfamily.Family) *knftables.Fake {
	if fam == ipfamily.IPv6 {
		return knftables.NewFake(knftables.IPv6Family, TableName)
	}
	return knftables.NewFake(knftables.IPv4Family, TableName)
}

// testRulesConfig is the configured part on testkit's node: kube-proxy's
// default mark bit and the pod range as --cluster-cidr.
func testRulesConfig(fam ipfamily.Family) rules.Config {
	return rules.Config{Family: fam, MasqueradeBit: 14, ClusterCIDRs: []netip.Prefix{testkit.PodCIDR(fam)}}
}

// testPolicy is --nodeport-addresses=primary with the node IPs as
// --bind-address would give them.
func testPolicy() nodeaddr.Policy { return nodeaddr.Policy{Primary: true} }

// localAddrs are the node's interface addresses in tests.
func localAddrs() ([]netip.Addr, error) {
	return []netip.Addr{testkit.NodeIP(ipfamily.IPv4), testkit.NodeIP(ipfamily.IPv6), netip.MustParseAddr("127.0.0.1"),
		netip.MustParseAddr("198.19.0.2"), netip.MustParseAddr("fd00:19::2")}, nil
}

// newTestMode builds the mode over one interface per family.
func newTestMode(t testing.TB, clock *testClock, nfts map[ipfamily.Family]knftables.Interface) *Mode {
	t.Helper()
	var fams []FamilyConfig
	for _, fam := range ipfamily.All() {
		if nft, ok := nfts[fam]; ok {
			fc := FamilyConfig{Rules: testRulesConfig(fam), NFT: nft}
			if _, ok := nft.(realIface); ok {
				fc.Lister, fc.Netlink = NewNetlinkLister(fam, TableName), nft.(realIface).netlink
			}
			if l, ok := nft.(Lister); ok {
				fc.Lister = l
			}
			fams = append(fams, fc)
		}
	}
	cfg := Config{Families: fams, NodeName: testkit.NodeName, NodePorts: testPolicy(), LocalAddresses: localAddrs, Logger: klog.Background()}
	if clock != nil {
		cfg.Now = clock.now
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func mustSync(t testing.TB, m *Mode, snap *servicemap.Snapshot, cs *servicemap.ChangeSet) {
	t.Helper()
	if err := m.Sync(context.Background(), snap, cs); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func full() *servicemap.ChangeSet { return &servicemap.ChangeSet{Full: true} }
