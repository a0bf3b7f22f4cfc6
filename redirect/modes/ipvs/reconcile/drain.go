package reconcile

import (
	"fmt"
	"net/netip"
	"slices"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// Drain deletes draining TCP real servers that hold no connection any more
// or have drained for DrainTimeout. Sync calls it too; the mode should also
// call it every few seconds between syncs, as connections end on their own.
func (r *Reconciler) Drain() (Result, error) {
	var res Result
	if r.cur == nil {
		return res, nil // the next Sync re-reads and drains
	}
	errs := r.drain(&res)
	res.Draining = len(r.draining)
	if len(errs) > 0 {
		r.cur = nil
		return res, fmt.Errorf("draining real servers: %w", errs[0])
	}
	return res, nil
}

// drain reads the connection counts of the virtual servers that have
// draining real servers (only those: the cost follows the drains, not the
// service count).
func (r *Reconciler) drain(res *Result) []error {
	if len(r.draining) == 0 {
		return nil
	}
	byService := make(map[desired.Key][]netip.AddrPort)
	for ref := range r.draining {
		byService[ref.VirtualServer] = append(byService[ref.VirtualServer], ref.RealServer)
	}
	now := r.opts.Clock.Now()
	var errs []error
	for _, k := range slicesSortedKeys(byService) {
		cs := r.cur.services[k]
		if cs == nil {
			for _, ap := range byService[k] {
				delete(r.draining, RealServerRef{k, ap})
			}
			continue
		}
		svc := handles.ToService(cs.vs)
		dests, err := r.opts.IPVS.GetDestinations(svc)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading connections of IPVS service %s: %w", k, err))
			continue
		}
		conns := make(map[netip.AddrPort]int, len(dests))
		for _, d := range dests {
			if rs, ok := handles.FromDestination(d); ok {
				conns[rs.AddrPort()] = d.ActiveConnections + d.InactiveConnections
			}
		}
		for _, ap := range byService[k] {
			ref := RealServerRef{k, ap}
			n, present := conns[ap]
			if present && n > 0 && now.Sub(r.draining[ref]) < r.opts.DrainTimeout {
				continue
			}
			if present {
				rs := desired.RealServer{Addr: ap.Addr(), Port: ap.Port()}
				if err := r.opts.IPVS.DelDestination(svc, handles.ToDestination(rs)); err != nil && !handles.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("deleting drained real server %s from IPVS service %s: %w", ap, k, err))
					continue
				}
				res.RemovedRealServers = append(res.RemovedRealServers, ref)
			}
			delete(cs.dests, ap)
			delete(r.draining, ref)
		}
	}
	return errs
}

func slicesSortedKeys(m map[desired.Key][]netip.AddrPort) []desired.Key {
	keys := make([]desired.Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, desired.Key.Compare)
	return keys
}
