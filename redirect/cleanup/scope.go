package cleanup

import (
	"slices"

	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/kernel"
)

// Scope is what one cleanup removes: everything the Remove lists own that
// Keep does not. Chains two modes share (the iptables and IPVS modes both
// write KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ...) stay when the
// kept mode owns them, and lose only the rules that point at what goes.
// The feature probe's leftovers are always removed.
type Scope struct {
	Remove []owned.Objects
	Keep   owned.Objects
}

// probeLeftovers are what kernel.Detect may leave behind when interrupted:
// removed by every cleanup.
func probeLeftovers() owned.Objects {
	return owned.Objects{
		Chains: []owned.Chain{{Table: "*", Name: kernel.ProbeChain}},
		Sets:   []owned.Set{{Name: kernel.ProbeIPSet}},
	}
}

// KubeProxyOnly are the objects of kube-proxy's modes kproxy does not
// implement (its nftables mode), for a node switched from kube-proxy.
func KubeProxyOnly() owned.Objects {
	return owned.Objects{NFTables: []string{"kube-proxy"}}
}

// resolve merges the removed lists once, for the many lookups a cleanup makes.
func (s Scope) resolve() resolvedScope {
	return resolvedScope{gone: owned.Merge(append(slices.Clone(s.Remove), probeLeftovers())...), keep: s.Keep}
}

type resolvedScope struct{ gone, keep owned.Objects }

// removeChain says whether chain in table goes.
func (s resolvedScope) removeChain(table, chain string) bool {
	return s.gone.HasChain(table, chain) && !s.keep.HasChain(table, chain)
}

// keptChain says whether chain in table belongs to the kept mode: it stays
// but loses rules pointing at what is removed.
func (s resolvedScope) keptChain(table, chain string) bool { return s.keep.HasChain(table, chain) }

// removeSet says whether the ipset name is destroyed.
func (s resolvedScope) removeSet(name string) bool {
	return s.gone.HasSet(name) && !s.keep.HasSet(name)
}

// ipvsLink returns the IPVS mode's link when it and the IPVS services go.
func (s resolvedScope) ipvsLink() (string, bool) {
	return s.gone.IPVSLink, s.gone.IPVSLink != "" && s.keep.IPVSLink == ""
}

// removeNFTable says whether the nftables table name goes.
func (s resolvedScope) removeNFTable(name string) bool {
	return s.gone.HasNFTable(name) && !s.keep.HasNFTable(name)
}

// removeLocalRoutes says whether kproxy's local routes go.
func (s resolvedScope) removeLocalRoutes() bool { return s.gone.LocalRoutes && !s.keep.LocalRoutes }
