// Package ipfamily is kproxy's one IP-family type: every layer (service map,
// modes, kernel probes, relays, conntrack) names a family with it, so a
// family read from an address means the same thing everywhere.
package ipfamily

import (
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"
)

// Family is an IP family. Its value is what logs and errors print.
type Family string

const (
	IPv4 Family = "IPv4"
	IPv6 Family = "IPv6"
)

// All lists the families in the order kproxy visits them.
func All() []Family { return []Family{IPv4, IPv6} }

// Of returns addr's family; an IPv4-mapped IPv6 address (as dual-stack
// sockets report IPv4 peers) is IPv4.
func Of(addr netip.Addr) Family {
	if addr.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// Index is 0 for IPv4 and 1 for IPv6, for per-family arrays.
func (f Family) Index() int {
	if f == IPv6 {
		return 1
	}
	return 0
}

// Bits is the length of a host prefix in f (32 or 128).
func (f Family) Bits() int {
	if f == IPv6 {
		return 128
	}
	return 32
}

// Domain is f's address family number (AF_INET or AF_INET6): a socket's
// domain, and the family netlink (routes, rules, conntrack) names it by.
func (f Family) Domain() int {
	if f == IPv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// Addrs returns the addresses of fam in addrs, unmapped, sorted and without
// duplicates.
func Addrs(addrs []netip.Addr, fam Family) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if Of(a) == fam {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// Prefixes returns the prefixes of fam in ps, in their order.
func Prefixes(ps []netip.Prefix, fam Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if Of(p.Addr()) == fam {
			out = append(out, p)
		}
	}
	return out
}

func (f Family) String() string { return string(f) }
