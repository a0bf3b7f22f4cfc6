package iptables

import (
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

var _ mode.Describer = (*Mode)(nil)

// Programmed implements mode.Describer: the chains each family's last
// sync wrote for a port (a port whose rules were rejected shows the ones it
// kept). It does not take m.mu, which a sync holds throughout.
func (m *Mode) Programmed() func(servicemap.ServicePortName) mode.Programmed {
	return kernelmode.Programmed(m.families.List(), func(f *family, name servicemap.ServicePortName) []mode.Chain {
		pr := f.programmed(name)
		if pr == nil {
			return nil
		}
		chains := make([]mode.Chain, 0, len(pr.Chains))
		for _, c := range pr.Chains {
			chains = append(chains, mode.Chain{Family: f.fam, Table: string(c.Table), Name: c.Name})
		}
		return chains
	}, "no chains of its own: no cluster IP of a proxied family, no usable endpoint, or not synced yet")
}
