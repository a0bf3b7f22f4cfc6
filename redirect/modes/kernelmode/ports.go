package kernelmode

import (
	"net/netip"
	"slices"

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
