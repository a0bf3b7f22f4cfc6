package iptables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestNodePortAddressesPrimary: with --nodeport-addresses=primary the
// NodePort jumps go to the Node object's primary IP only (not to the node's
// other address), every address before the Node is known, and move when
// the Node's address changes, without a Service change.
func TestNodePortAddressesPrimary(t *testing.T) {
	fake := fakeiptables.New(ipfamily.IPv4)
	kt, err := newTables(ipfamily.IPv4, kernel.NFT, fake)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{
		Families:  []FamilyConfig{{Rules: rules.Config{Family: ipfamily.IPv4, MasqueradeBit: 14}, Tables: fakeTables{kt, fake}}},
		NodeName:  "node",
		NodePorts: nodeaddr.Policy{Primary: true},
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.9")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	web := svc(name("web", "http"), "198.18.0.10", 1)
	web.NodePort = 30080
	node := func(addrs ...string) *servicemap.NodeInfo {
		n := &servicemap.NodeInfo{Name: "node"}
		for _, a := range addrs {
			n.Addresses = append(n.Addresses, netip.MustParseAddr(a))
		}
		return n
	}
	for i, st := range []struct {
		name    string
		node    *servicemap.NodeInfo
		changes *servicemap.ChangeSet
		want    []string
	}{
		{"no Node yet: every local address", nil, &servicemap.ChangeSet{Full: true},
			[]string{`-A KUBE-SERVICES ! -d 127.0.0.0/8 -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`}},
		{"the Node's primary IP", node("198.19.0.1"), &servicemap.ChangeSet{NodeChanged: true},
			[]string{`-A KUBE-SERVICES -d 198.19.0.1/32 -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -j KUBE-NODEPORTS`}},
		{"the Node's address changes", node("198.19.0.9", "198.19.0.1"), &servicemap.ChangeSet{NodeChanged: true},
			[]string{`-A KUBE-SERVICES -d 198.19.0.9/32 -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -j KUBE-NODEPORTS`}},
	} {
		t.Run(st.name, func(t *testing.T) {
			snap := servicemap.NewSnapshot(uint64(i+1), st.node, web)
			if err := m.Sync(context.Background(), snap, st.changes); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range fake.Rules("nat", "KUBE-SERVICES") {
				if strings.Contains(r, "-j KUBE-NODEPORTS") {
					got = append(got, r)
				}
			}
			if diff := cmp.Diff(st.want, got); diff != "" {
				t.Errorf("NodePort jumps (-want +got):\n%s", diff)
			}
		})
	}
}
