package kernelmode

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/sync/servicemap"
)

// PortName is "ns/name:port" ("ns/name" for an unnamed port): the name
// kube-proxy hashes into chain names and writes into comments. Unlike
// ServicePortName.String it carries no protocol.
func PortName(n servicemap.ServicePortName) string {
	s := n.Namespace + "/" + n.Name
	if n.Port != "" {
		s += ":" + n.Port
	}
	return s
}

// CheckNameChars refuses a port name whose namespace, name or port name
// has a character other than letters, digits, '-', '.' and '_', the ones
// rules take unquoted. The API server never lets other ones through; a
// services file might. into says where the name would go, for the error
// ("an iptables comment").
func CheckNameChars(n servicemap.ServicePortName, into string) error {
	for _, part := range [...]struct{ what, s string }{{"namespace", n.Namespace}, {"name", n.Name}, {"port name", n.Port}} {
		if NeedsQuotes(part.s) {
			return fmt.Errorf("%s %q: only letters, digits, '-', '.' and '_' can go into %s", part.what, part.s, into)
		}
	}
	return nil
}

// NeedsQuotes says whether s has a character other than letters, digits,
// '-', '.' and '_': one a name in a rule (iptables or nft) could not carry
// unquoted.
func NeedsQuotes(s string) bool {
	return strings.ContainsFunc(s, func(c rune) bool {
		return !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_')
	})
}

// ClusterIP returns sp's cluster IP of the family (v6 or not), unmapped.
func ClusterIP(sp *servicemap.ServicePort, v6 bool) (netip.Addr, bool) {
	for _, ip := range sp.ClusterIPs {
		if ip.IsValid() && servicemap.IsIPv6(ip) == v6 {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// AddrsOf returns the addresses of the family (v6 or not), without
// copying when all are: callers must not modify the result.
func AddrsOf(as []netip.Addr, v6 bool) []netip.Addr {
	keep := func(a netip.Addr) bool { return a.IsValid() && servicemap.IsIPv6(a) == v6 }
	if !slices.ContainsFunc(as, func(a netip.Addr) bool { return !keep(a) }) {
		return as
	}
	var out []netip.Addr
	for _, a := range as {
		if keep(a) {
			out = append(out, a)
		}
	}
	return out
}

// AppendEndpoint appends "ip:port" ("[ip]:port" for IPv6), an IPv4-mapped
// address written as plain IPv4 as kube-proxy's net.IP does.
func AppendEndpoint(b []byte, ep netip.AddrPort) []byte {
	addr := ep.Addr().Unmap()
	if addr.Is6() {
		b = append(b, '[')
		b = addr.AppendTo(b)
		b = append(b, ']')
	} else {
		b = addr.AppendTo(b)
	}
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(ep.Port()), 10)
}

// SortedAsText returns eps ordered by their "ip:port" text, as kube-proxy
// orders them, copying only when they are not in that order already: the
// lists may share memory with the snapshot, which must not change.
func SortedAsText(eps []servicemap.Endpoint) []servicemap.Endpoint {
	if slices.IsSortedFunc(eps, CompareAsText) {
		return eps
	}
	eps = slices.Clone(eps)
	slices.SortFunc(eps, CompareAsText)
	return eps
}

// CompareAsText compares endpoints as their "ip:port" text.
func CompareAsText(a, b servicemap.Endpoint) int {
	var ab, bb [64]byte
	return bytes.Compare(AppendEndpoint(ab[:0], a.AddrPort()), AppendEndpoint(bb[:0], b.AddrPort()))
}
