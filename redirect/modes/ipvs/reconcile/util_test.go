package reconcile

import "net/netip"

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func mustAddr(s string) netip.Addr         { return netip.MustParseAddr(s) }
func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
