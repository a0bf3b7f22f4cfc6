package ipfamily

import (
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want Family
	}{
		{"198.18.0.1", IPv4},
		{"::ffff:198.18.0.1", IPv4},
		{"fd00::1", IPv6},
		{"::1", IPv6},
	} {
		if got := Of(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Of(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

func TestDomain(t *testing.T) {
	for fam, want := range map[Family]int{IPv4: unix.AF_INET, IPv6: unix.AF_INET6} {
		if got := fam.Domain(); got != want {
			t.Errorf("%s.Domain() = %d, want %d", fam, got, want)
		}
	}
}

func TestAddrsAndPrefixes(t *testing.T) {
	addrs := []netip.Addr{
		netip.MustParseAddr("198.19.0.2"), netip.MustParseAddr("fd00::1"),
		netip.MustParseAddr("::ffff:198.19.0.1"), netip.MustParseAddr("198.19.0.2"),
	}
	if got, want := Addrs(addrs, IPv4), []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2")}; !slices.Equal(got, want) {
		t.Errorf("Addrs(IPv4) = %v, want %v", got, want)
	}
	if got, want := Addrs(addrs, IPv6), []netip.Addr{netip.MustParseAddr("fd00::1")}; !slices.Equal(got, want) {
		t.Errorf("Addrs(IPv6) = %v, want %v", got, want)
	}
	ps := []netip.Prefix{netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("198.19.0.0/16")}
	if got := Prefixes(ps, IPv4); !slices.Equal(got, ps[1:]) {
		t.Errorf("Prefixes(IPv4) = %v", got)
	}
	if IPv4.Index() != 0 || IPv6.Index() != 1 || IPv4.Bits() != 32 || IPv6.Bits() != 128 {
		t.Error("Index or Bits wrong")
	}
}
