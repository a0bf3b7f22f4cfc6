package iptables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestNodeCIDRDetector: with --detect-local-mode=NodeCIDR the masquerade
// rule of a cluster IP matches traffic from outside the Node object's pod
// CIDR (not --cluster-cidr), none before the Node is known, and follows a
// change of the Node's pod CIDR.
func TestNodeCIDRDetector(t *testing.T) {
	fake := fakeiptables.New(ipfamily.IPv4)
	kt, err := newTables(ipfamily.IPv4, kernel.NFT, fake)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{
		Families: []FamilyConfig{{Rules: rules.Config{Family: ipfamily.IPv4, MasqueradeBit: 14,
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")}}, Tables: fakeTables{kt, fake}}},
		NodeName:         "node",
		NodeCIDRDetector: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	web := svc(name("web", "http"), "198.18.0.10", 1)
	for i, st := range []struct {
		name     string
		podCIDRs []string
		want     string // the masquerade rule's source match; "" for none
	}{
		{"no Node yet: no detector", nil, ""},
		{"the Node's pod CIDR", []string{"198.19.1.0/24", "fd00:19:1::/64"}, "! -s 198.19.1.0/24 "},
		{"the pod CIDR changes", []string{"198.19.2.0/24"}, "! -s 198.19.2.0/24 "},
	} {
		t.Run(st.name, func(t *testing.T) {
			var node *servicemap.NodeInfo
			if st.podCIDRs != nil {
				node = &servicemap.NodeInfo{Name: "node"}
				for _, c := range st.podCIDRs {
					node.PodCIDRs = append(node.PodCIDRs, netip.MustParsePrefix(c))
				}
			}
			if err := m.Sync(context.Background(), servicemap.NewSnapshot(uint64(i+1), node, web), &servicemap.ChangeSet{NodeChanged: true}); err != nil {
				t.Fatal(err)
			}
			var masq []string
			for _, r := range strings.Split(fake.Save("nat"), "\n") {
				if strings.HasSuffix(r, "-j KUBE-MARK-MASQ") && strings.Contains(r, "cluster IP") {
					masq = append(masq, r)
				}
			}
			switch {
			case st.want == "" && len(masq) != 0:
				t.Errorf("masquerade rules without a detector: %q", masq)
			case st.want != "" && (len(masq) != 1 || !strings.Contains(masq[0], st.want)):
				t.Errorf("masquerade rules %q, want one with %q", masq, st.want)
			}
		})
	}
}
