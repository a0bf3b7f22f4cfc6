package ipvs

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/ipvs/fakeipvs"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
	"kproxy.dev/kproxy/sync/sysctl/fakesysctl"
)

// TestNodePortAddressesPrimary: with --nodeport-addresses=primary the
// NodePort virtual servers are on the Node object's primary IP only (not on
// the node's other address), on every local address before the Node is
// known, and move when the Node's address changes, without a Service change.
func TestNodePortAddressesPrimary(t *testing.T) {
	ipvs, link, sets := &fakeipvs.IPVS{}, &fakeipvs.Link{}, &fakeipvs.IPSets{}
	ipt := fakeiptables.New(ipfamily.IPv4)
	tables, err := NewTables(ipfamily.IPv4, kernel.NFT, ipt)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{
		Families:  []FamilyConfig{{Desired: baseConfig(), IPVS: ipvs, Link: link, IPSets: sets, Tables: tables}},
		NodeName:  "node-a",
		NodePorts: nodeaddr.Policy{Primary: true},
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{mustAddr("127.0.0.1"), mustAddr("198.19.0.1"), mustAddr("198.19.0.9")}, nil
		},
		Sysctls: newFakeSysctls(), DrainInterval: -1, Logger: klog.Background(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	web := testkit.Port("default", "web", 80, "198.18.0.10", testkit.NodePort(30080))
	web.Endpoints = append(web.Endpoints, testkit.EP("198.19.1.1:8080"))
	node := func(addrs ...string) *servicemap.NodeInfo {
		n := &servicemap.NodeInfo{Name: "node-a"}
		for _, a := range addrs {
			n.Addresses = append(n.Addresses, mustAddr(a))
		}
		return n
	}
	for i, st := range []struct {
		name string
		node *servicemap.NodeInfo
		want []string
	}{
		{"no Node yet: every local address", nil, []string{"TCP 198.19.0.1:30080", "TCP 198.19.0.9:30080"}},
		{"the Node's primary IP", node("198.19.0.1"), []string{"TCP 198.19.0.1:30080"}},
		{"the Node's address changes", node("198.19.0.9", "198.19.0.1"), []string{"TCP 198.19.0.9:30080"}},
	} {
		t.Run(st.name, func(t *testing.T) {
			snap := servicemap.NewSnapshot(uint64(i+1), st.node, web)
			if err := m.Sync(context.Background(), snap, &servicemap.ChangeSet{NodeChanged: st.node != nil}); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range strings.Split(fakeipvs.Dump(ipvs, link, sets), "\n") {
				if strings.Contains(line, ":30080") && !strings.HasPrefix(line, " ") {
					got = append(got, strings.Fields(line)[0]+" "+strings.Fields(line)[1])
				}
			}
			if diff := cmp.Diff(st.want, got); diff != "" {
				t.Errorf("NodePort virtual servers (-want +got):\n%s\n%s", diff, fakeipvs.Dump(ipvs, link, sets))
			}
		})
	}
}

// TestInitWritesTheSysctls: --init-only writes the sysctls the first sync
// would, before any sync and with no service.
func TestInitWritesTheSysctls(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "strict ARP"}[strict], func(t *testing.T) {
			ipvs, link, sets := &fakeipvs.IPVS{}, &fakeipvs.Link{}, &fakeipvs.IPSets{}
			ipt := fakeiptables.New(ipfamily.IPv4)
			tables, err := NewTables(ipfamily.IPv4, kernel.NFT, ipt)
			if err != nil {
				t.Fatal(err)
			}
			sysctls := fakesysctl.New(map[string]string{
				"net/ipv4/ip_forward": "0", "net/ipv4/vs/conntrack": "0",
				"net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
				"net/ipv4/conf/all/arp_ignore": "0", "net/ipv4/conf/all/arp_announce": "0",
			})
			dc := baseConfig()
			dc.StrictARP = strict
			m, err := New(Config{
				Families: []FamilyConfig{{Desired: dc, IPVS: ipvs, Link: link, IPSets: sets, Tables: tables}},
				NodeName: "node-a", Sysctls: sysctls, DrainInterval: -1, Logger: klog.Background(),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close() })
			if err := m.Init(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1",
				"net/ipv4/vs/expire_nodest_conn": "1", "net/ipv4/vs/expire_quiescent_template": "1",
				"net/ipv4/conf/all/arp_ignore": "0", "net/ipv4/conf/all/arp_announce": "0",
			}
			if strict {
				want["net/ipv4/conf/all/arp_ignore"], want["net/ipv4/conf/all/arp_announce"] = "1", "2"
			}
			for name, v := range want {
				if got, err := sysctls.Read(name); err != nil || got != v {
					t.Errorf("%s = %q (%v), want %q", name, got, err, v)
				}
			}
			if dump := fakeipvs.Dump(ipvs, link, sets); strings.Contains(dump, "TCP") {
				t.Errorf("Init programmed IPVS:\n%s", dump)
			}
		})
	}
}

// TestNodeCIDRDetector: with --detect-local-mode=NodeCIDR cluster IP
// traffic from outside the Node object's pod CIDR is masqueraded (not
// --cluster-cidr's), with no detector before the Node is known, and the rule
// follows a change of the pod CIDR.
func TestNodeCIDRDetector(t *testing.T) {
	ipvs, sets := &fakeipvs.IPVS{}, &fakeipvs.IPSets{}
	ipt := fakeiptables.New(ipfamily.IPv4)
	tables, err := NewTables(ipfamily.IPv4, kernel.NFT, ipt)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{
		Families: []FamilyConfig{{Desired: baseConfig(), IPVS: ipvs, Link: &fakeipvs.Link{}, IPSets: sets, Tables: tables}},
		NodeName: "node-a", NodeCIDRDetector: true,
		Sysctls: newFakeSysctls(), DrainInterval: -1, Logger: klog.Background(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	web := testkit.Port("default", "web", 80, "198.18.0.10")
	web.Endpoints = append(web.Endpoints, testkit.EP("198.19.1.1:8080"))
	for i, st := range []struct {
		name string
		node *servicemap.NodeInfo
		want string
	}{
		{"no Node yet: no detector", nil, "-A KUBE-SERVICES -m comment"},
		{"the Node's pod CIDR", &servicemap.NodeInfo{Name: "node-a", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24")}},
			"-A KUBE-SERVICES ! -s 198.19.1.0/24 -m comment"},
		{"the pod CIDR changes", &servicemap.NodeInfo{Name: "node-a", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.2.0/24")}},
			"-A KUBE-SERVICES ! -s 198.19.2.0/24 -m comment"},
	} {
		t.Run(st.name, func(t *testing.T) {
			if err := m.Sync(context.Background(), servicemap.NewSnapshot(uint64(i+1), st.node, web), &servicemap.ChangeSet{NodeChanged: true}); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range ipt.Rules("nat", "KUBE-SERVICES") {
				if strings.Contains(r, "KUBE-CLUSTER-IP") && strings.HasSuffix(r, "-j KUBE-MARK-MASQ") {
					got = append(got, r)
				}
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], st.want) {
				t.Errorf("cluster IP masquerade rules %q, want one starting %q", got, st.want)
			}
		})
	}
}
