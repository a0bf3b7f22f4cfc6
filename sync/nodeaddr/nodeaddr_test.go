package nodeaddr

import (
	"net/netip"
	"slices"
	"testing"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestFor(t *testing.T) {
	node := &servicemap.NodeInfo{Name: "n", Addresses: addrs("127.0.0.1", "198.19.0.1", "198.19.0.9", "fd00::1")}
	v4only := &servicemap.NodeInfo{Name: "n", Addresses: addrs("198.19.0.1")}
	for _, tc := range []struct {
		name   string
		policy Policy
		node   *servicemap.NodeInfo
		fam    ipfamily.Family
		want   []netip.Prefix
	}{
		{"unset admits everything", Policy{}, node, ipfamily.IPv4, nil},
		{"CIDRs of the family", Policy{CIDRs: prefixes("198.19.0.0/24", "fd00::/64")}, node, ipfamily.IPv4, prefixes("198.19.0.0/24")},
		{"CIDRs of the other family only: every address", Policy{CIDRs: prefixes("fd00::/64")}, node, ipfamily.IPv4, nil},
		{"primary from the Node object, loopback skipped", Policy{Primary: true}, node, ipfamily.IPv4, prefixes("198.19.0.1/32")},
		{"primary IPv6 from the Node object", Policy{Primary: true}, node, ipfamily.IPv6, prefixes("fd00::1/128")},
		{"primary from a specific bind address", Policy{Primary: true, BindAddress: netip.MustParseAddr("198.19.0.9")}, node, ipfamily.IPv4, prefixes("198.19.0.9/32")},
		{"primary, bind address of the other family", Policy{Primary: true, BindAddress: netip.MustParseAddr("198.19.0.9")}, node, ipfamily.IPv6, prefixes("fd00::1/128")},
		{"primary, unspecified bind address", Policy{Primary: true, BindAddress: netip.MustParseAddr("0.0.0.0")}, node, ipfamily.IPv4, prefixes("198.19.0.1/32")},
		{"primary, loopback bind address: every address", Policy{Primary: true, BindAddress: netip.MustParseAddr("127.0.0.1")}, node, ipfamily.IPv4, nil},
		{"primary, no Node yet", Policy{Primary: true}, nil, ipfamily.IPv4, nil},
		{"primary, Node without that family", Policy{Primary: true}, v4only, ipfamily.IPv6, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.policy.For(tc.fam, tc.node); !slices.Equal(got, tc.want) {
				t.Errorf("For(%s) = %v, want %v", tc.fam, got, tc.want)
			}
		})
	}
}

func TestMatchingHelpers(t *testing.T) {
	local := addrs("127.0.0.1", "198.19.0.1", "198.19.1.1", "fd00::1", "::ffff:198.19.0.2")
	for _, tc := range []struct {
		name     string
		cidrs    []netip.Prefix
		matchAll bool
		loopback bool
		selected []netip.Addr
	}{
		{"empty", nil, true, true, addrs("127.0.0.1", "198.19.0.1", "198.19.0.2", "198.19.1.1")},
		{"zero prefix", prefixes("0.0.0.0/0"), true, true, addrs("127.0.0.1", "198.19.0.1", "198.19.0.2", "198.19.1.1")},
		{"a subnet", prefixes("198.19.0.0/24"), false, false, addrs("198.19.0.1", "198.19.0.2")},
		{"loopback admitted", prefixes("127.0.0.0/8"), false, true, addrs("127.0.0.1")},
		{"a host", prefixes("198.19.1.1/32"), false, false, addrs("198.19.1.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MatchAll(tc.cidrs); got != tc.matchAll {
				t.Errorf("MatchAll = %v, want %v", got, tc.matchAll)
			}
			if got := AdmitsIPv4Loopback(tc.cidrs); got != tc.loopback {
				t.Errorf("AdmitsIPv4Loopback = %v, want %v", got, tc.loopback)
			}
			if got := Select(tc.cidrs, local, ipfamily.IPv4); !slices.Equal(got, tc.selected) {
				t.Errorf("Select = %v, want %v", got, tc.selected)
			}
		})
	}
}

func TestListenAddresses(t *testing.T) {
	local := addrs("127.0.0.1", "198.19.0.1", "198.19.1.1", "fd00::1", "fe80::1")
	node := &servicemap.NodeInfo{Addresses: addrs("198.19.0.1")}
	for _, tc := range []struct {
		name   string
		policy Policy
		want   []netip.Addr
	}{
		{"unset: everywhere", Policy{}, nil},
		{"a subnet: its addresses, IPv6 everywhere", Policy{CIDRs: prefixes("198.19.1.0/24")}, addrs("198.19.1.1", "::")},
		{"primary: the node IP, IPv6 everywhere", Policy{Primary: true}, addrs("198.19.0.1", "::")},
		{"an IPv6 subnet: IPv4 everywhere, its addresses", Policy{CIDRs: prefixes("fd00::/64")}, addrs("0.0.0.0", "fd00::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.policy.ListenAddresses(node, local); !slices.Equal(got, tc.want) {
				t.Errorf("ListenAddresses = %v, want %v", got, tc.want)
			}
		})
	}
}
