// Package nodeaddr is kproxy's one reading of --nodeport-addresses: which of
// this node's addresses NodePorts and health-check node ports answer on, per
// IP family, including the special value "primary" (the node's primary IP
// from --bind-address or the Node object). Every mode asks it instead of
// interpreting the flag itself.
package nodeaddr

import (
	"net/netip"
	"slices"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Policy is --nodeport-addresses with what "primary" needs to resolve.
type Policy struct {
	// CIDRs restrict NodePorts to the node addresses inside them; empty
	// (and not Primary) means every address.
	CIDRs []netip.Prefix
	// Primary is --nodeport-addresses=primary: only the node's primary IP
	// of each family.
	Primary bool
	// BindAddress is --bind-address; a specific one is the node's primary
	// IP of its family.
	BindAddress netip.Addr
}

// PrimaryIP returns the node's primary IP of fam: --bind-address when it is
// specific and of fam, else the Node object's first address of fam.
func (p Policy) PrimaryIP(fam ipfamily.Family, node *servicemap.NodeInfo) (netip.Addr, bool) {
	if b := p.BindAddress.Unmap(); b.IsValid() && !b.IsUnspecified() && ipfamily.Of(b) == fam {
		return b, true
	}
	if node == nil {
		return netip.Addr{}, false
	}
	for _, a := range node.Addresses {
		if a = a.Unmap(); ipfamily.Of(a) == fam && !a.IsLoopback() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// For resolves the policy for one family: the CIDRs NodePorts of fam answer
// in, empty meaning every address of fam (see MatchAll). "primary" becomes
// the primary IP's host prefix. A family with no primary IP known (no
// --bind-address of it and no address of it on the Node object) gets every
// address, as kube-proxy does for a family it found no node IP in; so does
// a loopback primary IP.
func (p Policy) For(fam ipfamily.Family, node *servicemap.NodeInfo) []netip.Prefix {
	if p.Primary {
		// A loopback primary IP (--bind-address=127.0.0.1) restricts
		// nothing: kube-proxy leaves it out of the resolved list.
		if ip, ok := p.PrimaryIP(fam, node); ok && !ip.IsLoopback() {
			return []netip.Prefix{netip.PrefixFrom(ip, ip.BitLen())}
		}
		return nil
	}
	return ipfamily.Prefixes(p.CIDRs, fam)
}

// MatchAll says whether CIDRs (one family's, from For) admit every address.
func MatchAll(cidrs []netip.Prefix) bool {
	return len(cidrs) == 0 || slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Bits() == 0 })
}

// Contains says whether addr is inside CIDRs (one family's, from For).
func Contains(cidrs []netip.Prefix, addr netip.Addr) bool {
	addr = addr.Unmap()
	if len(cidrs) == 0 {
		return true
	}
	return slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// AdmitsIPv4Loopback says whether NodePorts may answer on IPv4 loopback
// (--iptables-localhost-nodeports applies only then): every address is
// admitted, or a prefix is a loopback one or holds 127.0.0.0, as kube-proxy
// judges it.
func AdmitsIPv4Loopback(cidrs []netip.Prefix) bool {
	return MatchAll(cidrs) || slices.ContainsFunc(cidrs, func(p netip.Prefix) bool {
		return p.Addr().Is4() && (p.Addr().IsLoopback() || p.Contains(netip.AddrFrom4([4]byte{127, 0, 0, 0})))
	})
}

// Select returns the addresses of local, of fam, inside cidrs, unmapped,
// sorted and without duplicates: the addresses NodePorts answer on when not
// MatchAll.
func Select(cidrs []netip.Prefix, local []netip.Addr, fam ipfamily.Family) []netip.Addr {
	var out []netip.Addr
	for _, a := range ipfamily.Addrs(local, fam) {
		if Contains(cidrs, a) {
			out = append(out, a)
		}
	}
	return out
}

// ListenAddresses returns where node-wide listeners (health-check node
// ports) bind: nil means every address (no restriction in any family),
// otherwise, per family, the local addresses the policy admits, or the
// family's unspecified address (0.0.0.0, ::) when it admits every one, as
// kube-proxy listens per family (a link-local address cannot be bound
// without its zone, so listing them is no way to say "all").
func (p Policy) ListenAddresses(node *servicemap.NodeInfo, local []netip.Addr) []netip.Addr {
	var out []netip.Addr
	all := true
	for _, fam := range ipfamily.All() {
		cidrs := p.For(fam, node)
		if MatchAll(cidrs) {
			out = append(out, unspecified(fam))
			continue
		}
		all = false
		out = append(out, Select(cidrs, local, fam)...)
	}
	if all {
		return nil
	}
	return out
}

func unspecified(fam ipfamily.Family) netip.Addr {
	if fam == ipfamily.IPv6 {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}
