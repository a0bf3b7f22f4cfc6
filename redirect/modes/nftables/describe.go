package nftables

import (
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
	return func(name servicemap.ServicePortName) mode.Programmed {
		var out mode.Programmed
		for _, f := range m.families {
			p := f.programmed(name)
			if p == nil {
				continue
			}
			table := "ip " + TableName
			if f.fam == ipfamily.IPv6 {
				table = "ip6 " + TableName
			}
			for _, c := range p.Chains {
				out.Chains = append(out.Chains, mode.Chain{Family: f.fam, Table: table, Name: c.Name})
			}
		}
		if len(out.Chains) == 0 {
			out.Note = "no chains of its own: no cluster IP of a proxied family, or not synced yet"
		}
		return out
	}
}
