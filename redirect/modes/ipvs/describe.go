package ipvs

import (
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

var _ mode.Describer = (*Mode)(nil)

// Programmed implements mode.Describer: the virtual servers, with their
// real servers, of each family's last fully successful sync. The states
// are indexed by service port once per call (O(virtual servers)); a sync
// only stores a pointer, so it is never held up.
func (m *Mode) Programmed() func(servicemap.ServicePortName) mode.Programmed {
	type owned struct {
		fam *family
		svc *desired.Service
	}
	index := map[servicemap.ServicePortName][]owned{}
	for _, f := range m.families.List() {
		st := f.inForce.Load()
		if st == nil {
			continue
		}
		for i := range st.Services {
			s := &st.Services[i]
			index[s.Owner] = append(index[s.Owner], owned{f, s})
		}
	}
	return func(name servicemap.ServicePortName) mode.Programmed {
		var out mode.Programmed
		for _, o := range index[name] {
			vs := mode.VirtualServer{Family: o.fam.fam, Address: o.svc.Key.String(), Scheduler: o.svc.Scheduler,
				RealServers: make([]mode.RealServer, 0, len(o.svc.RealServers))}
			if o.svc.Flags&desired.FlagPersistent != 0 {
				vs.PersistenceSeconds = o.svc.Timeout
			}
			for _, r := range o.svc.RealServers {
				vs.RealServers = append(vs.RealServers, mode.RealServer{Address: r.AddrPort().String(), Weight: r.Weight})
			}
			out.VirtualServers = append(out.VirtualServers, vs)
		}
		if len(out.VirtualServers) == 0 {
			out.Note = "no virtual server: no address of a proxied family, another port holds it, or not synced yet"
		}
		return out
	}
}
