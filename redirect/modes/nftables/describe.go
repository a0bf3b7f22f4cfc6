package nftables

import (
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

var _ mode.Describer = (*Mode)(nil)

// Programmed implements mode.Describer: the chains each family's last
// sync wrote for a port (a port whose rules were rejected shows the ones it
// kept), in table "ip kube-proxy" or "ip6 kube-proxy". It does not take
// m.mu, which a sync holds throughout.
func (m *Mode) Programmed() func(servicemap.ServicePortName) mode.Programmed {
	return kernelmode.Programmed(m.families.List(), func(f *family, name servicemap.ServicePortName) []mode.Chain {
		p := f.programmed(name)
		if p == nil {
			return nil
		}
		table := "ip " + TableName
		if f.fam == ipfamily.IPv6 {
			table = "ip6 " + TableName
		}
		chains := make([]mode.Chain, 0, len(p.Chains))
		for _, c := range p.Chains {
			chains = append(chains, mode.Chain{Family: f.fam, Table: table, Name: c.Name})
		}
		return chains
	}, "no chains of its own: no cluster IP of a proxied family, or not synced yet")
}
