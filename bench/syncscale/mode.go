package syncscale

import (
	"fmt"
	"slices"
	"strings"

	"kproxy.dev/kproxy/redirect/kernel"
)

// Mode is a proxy mode a row measures, both proxies in it: the iptables
// mode on one of the two iptables backends, or the nftables mode.
type Mode string

const (
	IPTablesNFT    Mode = "iptables-nft"
	IPTablesLegacy Mode = "iptables-legacy"
	NFTables       Mode = "nftables"
	// The userspace mode with each kind of portal: kproxy only (kube-proxy
	// v1.36 has no userspace mode), measured by bench/modes, not in this
	// package's table.
	UserspaceRedirect Mode = "userspace-redirect"
	UserspaceLocal    Mode = "userspace-local"
	UserspaceSKLookup Mode = "userspace-sklookup"
)

// Modes lists every mode, in table order.
func Modes() []Mode { return []Mode{IPTablesNFT, IPTablesLegacy, NFTables} }

// IPTablesMode returns the iptables mode on backend b.
func IPTablesMode(b kernel.Backend) Mode { return Mode("iptables-" + string(b)) }

// Backend is the iptables backend of an iptables mode; ok is false for the
// nftables mode, which writes nf_tables through nft and needs no backend.
func (m Mode) Backend() (b kernel.Backend, ok bool) {
	switch m {
	case IPTablesNFT:
		return kernel.NFT, true
	case IPTablesLegacy:
		return kernel.Legacy, true
	}
	return "", false
}

// ProxyMode is the --proxy-mode value both proxies run with.
func (m Mode) ProxyMode() string {
	switch m {
	case NFTables:
		return "nftables"
	case UserspaceRedirect, UserspaceLocal, UserspaceSKLookup:
		return "userspace"
	}
	return "iptables"
}

// Portals is the userspace mode's --userspace-portals value; ok is false
// for the kernel-NAT modes.
func (m Mode) Portals() (portals string, ok bool) {
	switch m {
	case UserspaceRedirect:
		return "redirect", true
	case UserspaceLocal:
		return "local", true
	case UserspaceSKLookup:
		return "sklookup", true
	}
	return "", false
}

// parseModes reads a comma-separated list of modes; the iptables backends'
// short names (nft, legacy: what KPROXY_SYNCSCALE_BACKENDS took) name their
// iptables modes.
func parseModes(v string) ([]Mode, error) {
	var out []Mode
	for _, f := range strings.Split(v, ",") {
		m := Mode(strings.TrimSpace(f))
		if b := kernel.Backend(m); slices.Contains(kernel.Backends(), b) {
			m = IPTablesMode(b)
		}
		if !slices.Contains(Modes(), m) {
			return nil, fmt.Errorf("%q is not a proxy mode (want iptables-nft, iptables-legacy or nftables)", f)
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// parseProxies reads a comma-separated list of the proxies to run.
func parseProxies(v string) ([]Proxy, error) {
	var out []Proxy
	for _, f := range strings.Split(v, ",") {
		p := Proxy(strings.TrimSpace(f))
		if p != Kproxy && p != KubeProxy {
			return nil, fmt.Errorf("%q is not a proxy (want kproxy or kube-proxy)", f)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}
