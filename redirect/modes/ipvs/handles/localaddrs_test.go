package handles

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"kproxy.dev/kproxy/bench/lab"
)

func TestLocalAddressesExceptSkipsTheDummyLink(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	// This kernel has no dummy links: a veth pair stands in for
	// kube-ipvs0 and a node interface.
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: DummyLink}, PeerName: "kp-node"}); err != nil {
		t.Fatalf("adding a veth pair: %v", err)
	}
	for name, cidr := range map[string]string{DummyLink: "198.18.0.10/32", "kp-node": "198.19.0.1/24"} {
		link, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		p := netip.MustParsePrefix(cidr)
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatalf("adding %s to %s: %v", cidr, name, err)
		}
	}
	got, err := LocalAddressesExcept(DummyLink)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"127.0.0.1", "198.19.0.1"} {
		if !slices.Contains(got, netip.MustParseAddr(want)) {
			t.Errorf("LocalAddressesExcept = %v, missing %s", got, want)
		}
	}
	if slices.Contains(got, netip.MustParseAddr("198.18.0.10")) {
		t.Errorf("LocalAddressesExcept = %v lists %s's address", got, DummyLink)
	}
}
