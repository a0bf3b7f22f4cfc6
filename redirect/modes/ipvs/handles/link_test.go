package handles

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/lab"
)

// TestLinkBindsOnTheRememberedIndex shows AddAddr and DelAddr take the
// remembered index without looking the link up by name: pointed at the
// loopback, the handle binds there. (Never so in use: the kernel does not
// reuse indexes.) Once that index fails with ENODEV, it looks up again.
func TestLinkBindsOnTheRememberedIndex(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	l := NewLink(false)
	if err := l.EnsureLink(); errors.Is(err, unix.EOPNOTSUPP) {
		// No dummy links on this kernel: a veth stands in.
		err = netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: DummyLink}, PeerName: "kp-ipvs-peer"})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	link, err := netlink.LinkByName(DummyLink)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("198.18.0.20"), netip.MustParseAddr("198.18.0.21")
	if err := l.AddAddr(a); err != nil {
		t.Fatal(err)
	}
	if got := int(l.index.Load()); got != link.Attrs().Index {
		t.Fatalf("remembered index %d, want %s's %d", got, DummyLink, link.Attrs().Index)
	}

	l.index.Store(int32(lo.Attrs().Index))
	if err := l.AddAddr(b); err != nil {
		t.Fatal(err)
	}
	if !hasAddr(t, lo, b) || hasAddr(t, link, b) {
		t.Errorf("%s went to %s rather than the remembered index (lo)", b, DummyLink)
	}
	if err := l.DelAddr(b); err != nil || hasAddr(t, lo, b) {
		t.Errorf("DelAddr(%s) on the remembered index = %v; still on lo: %v", b, err, hasAddr(t, lo, b))
	}

	l.index.Store(1 << 30) // no such device
	if err := l.DelAddr(a); err != nil {
		t.Fatalf("DelAddr after ENODEV: %v, want the link looked up again", err)
	}
	if hasAddr(t, link, a) || int(l.index.Load()) != link.Attrs().Index {
		t.Errorf("after ENODEV: %s still bound or index %d not %d", a, l.index.Load(), link.Attrs().Index)
	}
}

func hasAddr(t *testing.T, link netlink.Link, a netip.Addr) bool {
	t.Helper()
	list, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(list, func(x netlink.Addr) bool {
		got, _ := netip.AddrFromSlice(x.IP)
		return got.Unmap() == a
	})
}
