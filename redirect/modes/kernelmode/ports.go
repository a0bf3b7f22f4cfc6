package kernelmode

import (
	"bytes"
	"net/netip"
	"slices"
	"strconv"

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
