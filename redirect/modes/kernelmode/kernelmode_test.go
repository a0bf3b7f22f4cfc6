package kernelmode

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

func TestReadAndLocalCIDRs(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	node := &servicemap.NodeInfo{
		Name:      "node-1",
		Addresses: []netip.Addr{a("198.19.0.1"), a("fd00:19::1")},
		PodCIDRs:  []netip.Prefix{p("198.19.1.0/24"), p("fd00:19:1::/64")},
	}
	for _, tc := range []struct {
		name          string
		n             Node
		snap          *servicemap.Snapshot
		wantNodeIPs   []netip.Addr
		wantCIDRs     []netip.Prefix
		wantDetecting bool
		wantNodePorts []netip.Prefix
	}{
		{name: "IPv4, cluster CIDR detector", n: Node{Family: ipfamily.IPv4, Name: "node-1"},
			snap: servicemap.NewSnapshot(1, node), wantNodeIPs: []netip.Addr{a("198.19.0.1")}},
		{name: "IPv6, NodeCIDR detector", n: Node{Family: ipfamily.IPv6, Name: "node-1", NodeCIDR: true},
			snap: servicemap.NewSnapshot(1, node), wantNodeIPs: []netip.Addr{a("fd00:19::1")},
			wantCIDRs: []netip.Prefix{p("fd00:19:1::/64")}, wantDetecting: true},
		{name: "NodeCIDR detector before the Node is known", n: Node{Family: ipfamily.IPv4, NodeCIDR: true},
			snap: servicemap.NewSnapshot(1, nil), wantDetecting: true},
		{name: "no snapshot", n: Node{Family: ipfamily.IPv4}},
		{name: "--nodeport-addresses", n: Node{Family: ipfamily.IPv4, NodePorts: nodeaddr.Policy{CIDRs: []netip.Prefix{p("198.19.0.0/24")}}},
			snap: servicemap.NewSnapshot(1, node), wantNodeIPs: []netip.Addr{a("198.19.0.1")}, wantNodePorts: []netip.Prefix{p("198.19.0.0/24")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.n.Read(tc.snap)
			if !slices.Equal(f.NodeIPs, tc.wantNodeIPs) {
				t.Errorf("NodeIPs = %v, want %v", f.NodeIPs, tc.wantNodeIPs)
			}
			if !slices.Equal(f.NodePortAddresses, tc.wantNodePorts) {
				t.Errorf("NodePortAddresses = %v, want %v", f.NodePortAddresses, tc.wantNodePorts)
			}
			cidrs, ok := tc.n.LocalCIDRs(f)
			if ok != tc.wantDetecting || !slices.Equal(cidrs, tc.wantCIDRs) {
				t.Errorf("LocalCIDRs = %v, %v; want %v, %v", cidrs, ok, tc.wantCIDRs, tc.wantDetecting)
			}
		})
	}
}

func TestAddrs(t *testing.T) {
	a := netip.MustParseAddr
	list := func() ([]netip.Addr, error) {
		return []netip.Addr{a("fd00:19::1"), a("198.19.0.2"), a("198.19.0.1")}, nil
	}
	got, err := Node{Family: ipfamily.IPv4, LocalAddrs: list}.Addrs()
	if want := []netip.Addr{a("198.19.0.1"), a("198.19.0.2")}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Addrs() = %v, %v; want %v", got, err, want)
	}
	if got, err := (Node{Family: ipfamily.IPv4}).Addrs(); got != nil || err != nil {
		t.Errorf("Addrs() without LocalAddrs = %v, %v; want none", got, err)
	}
	failing := func() ([]netip.Addr, error) { return nil, errors.New("netlink closed") }
	if _, err := (Node{Family: ipfamily.IPv4, LocalAddrs: failing}).Addrs(); err == nil {
		t.Error("Addrs() hid LocalAddrs' error")
	}
}

func TestBuildPorts(t *testing.T) {
	name := func(n string) servicemap.ServicePortName {
		return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: n}, Port: "http", Protocol: "TCP"}
	}
	good, bad, gone, badNew := name("good"), name("bad"), name("gone"), name("bad-new")
	snap := servicemap.NewSnapshot(1, nil,
		&servicemap.ServicePort{Name: good}, &servicemap.ServicePort{Name: bad}, &servicemap.ServicePort{Name: badNew})
	last := map[servicemap.ServicePortName]*string{bad: new("bad's last good rules"), gone: new("gone's rules")}
	rejected := 0
	out, err := BuildPorts(snap, []servicemap.ServicePortName{good, bad, gone, badNew}, last,
		func(sp *servicemap.ServicePort) (*string, error) {
			if sp.Name == good {
				return new("good's rules"), nil
			}
			return nil, errors.New("service port " + sp.Name.String() + ": rejected")
		}, func() { rejected++ })
	want := map[servicemap.ServicePortName]string{good: "good's rules", bad: "bad's last good rules"}
	for _, n := range []servicemap.ServicePortName{good, bad, gone, badNew} {
		got, ok := out[n]
		switch w, wantRules := want[n]; {
		case !ok:
			t.Errorf("%s: missing from the result", n)
		case wantRules && (got == nil || *got != w):
			t.Errorf("%s: got %v, want %q", n, got, w)
		case !wantRules && got != nil:
			t.Errorf("%s: got %q, want none", n, *got)
		}
	}
	if rejected != 2 || err == nil {
		t.Errorf("rejected %d ports with error %v; want 2 and an error", rejected, err)
	}
}
