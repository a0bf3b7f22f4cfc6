package reconcile

import (
	"context"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// removeUnwanted deletes the virtual servers the plan found unwanted. It
// returns the slots in current.applied of those it deleted.
func (r *Reconciler) removeUnwanted(p servicePlan, res *Result) (dropped []int, errs []error) {
	for _, u := range p.unwanted {
		cs := r.cur.services[u.key]
		if cs == nil {
			// Recorded but gone from the view: nothing to delete.
			dropped = appendSlot(dropped, u.slot)
			continue
		}
		if err := r.opts.IPVS.DelService(handles.ToService(cs.vs)); err != nil && !handles.IsNoService(err) {
			errs = append(errs, fmt.Errorf("deleting IPVS service %s: %w", u.key, err))
			continue
		}
		delete(r.cur.services, u.key)
		for ref := range r.draining {
			if ref.VirtualServer == u.key {
				delete(r.draining, ref)
			}
		}
		res.RemovedVirtualServers = append(res.RemovedVirtualServers, u.key)
		dropped = appendSlot(dropped, u.slot)
	}
	return dropped, errs
}

func appendSlot(slots []int, slot int) []int {
	if slot < 0 {
		return slots
	}
	return append(slots, slot)
}

// syncServices runs syncService on the services the plan visits, records
// in place what it applied to recorded ones, and returns what it applied
// to the others. A done context fails the sync whenever there are
// services, visited or not, so a cancelled sync is never taken for a
// complete one.
func (r *Reconciler) syncServices(ctx context.Context, want *desired.State, p servicePlan, res *Result) (added []appliedService, errs []error) {
	if len(want.Services) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, []error{err}
	}
	for _, v := range p.visits {
		if err := ctx.Err(); err != nil {
			return added, append(errs, err)
		}
		s := &want.Services[v.want]
		if err := r.syncService(s, res); err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case !p.record:
		case v.slot >= 0:
			r.cur.applied[v.slot] = appliedFrom(s)
		default:
			added = append(added, appliedFrom(s))
		}
	}
	return added, errs
}

// syncService brings one virtual server in line: create or update it, add
// and re-weight its real servers, retire the extra ones, bind its address.
// It stops at the first failure, so the address is bound only once the
// real servers are in place.
func (r *Reconciler) syncService(want *desired.Service, res *Result) error {
	k := want.Key
	svc := handles.ToService(want.VirtualServer)
	cs := r.cur.services[k]
	switch {
	case cs == nil:
		if err := r.opts.IPVS.NewService(svc); err != nil {
			return fmt.Errorf("creating IPVS service %s: %w", k, err)
		}
		cs = &currentService{vs: want.VirtualServer, dests: make(map[netip.AddrPort]int)}
		r.cur.services[k] = cs
	case cs.vs != want.VirtualServer:
		if err := r.opts.IPVS.UpdateService(svc); err != nil {
			return fmt.Errorf("updating IPVS service %s: %w", k, err)
		}
		cs.vs = want.VirtualServer
	}
	wanted := make(map[netip.AddrPort]bool, len(want.RealServers))
	for _, rs := range want.RealServers {
		ap := rs.AddrPort()
		wanted[ap] = true
		w, ok := cs.dests[ap]
		switch {
		case !ok:
			if err := r.opts.IPVS.NewDestination(svc, handles.ToDestination(rs)); err != nil {
				return fmt.Errorf("adding real server %s to IPVS service %s: %w", ap, k, err)
			}
		case w != rs.Weight:
			// Also revives a draining real server that is wanted again.
			if err := r.opts.IPVS.UpdateDestination(svc, handles.ToDestination(rs)); err != nil {
				return fmt.Errorf("setting weight %d of real server %s in IPVS service %s: %w", rs.Weight, ap, k, err)
			}
		}
		cs.dests[ap] = rs.Weight
		delete(r.draining, RealServerRef{k, ap})
	}
	for ap, w := range cs.dests {
		if wanted[ap] {
			continue
		}
		if err := r.retire(cs, ap, w, res); err != nil {
			return err
		}
	}
	if want.Bind && !r.cur.addrs[k.Addr] {
		if err := r.opts.Link.AddAddr(k.Addr); err != nil && !handles.IsExist(err) {
			return fmt.Errorf("binding %s to %s for IPVS service %s: %w", k.Addr, handles.DummyLink, k, err)
		}
		r.cur.addrs[k.Addr] = true
		r.cur.cover.include(k.Addr)
	}
	return nil
}

// retire removes an unwanted real server: TCP ones drain at weight 0
// first, others go at once.
func (r *Reconciler) retire(cs *currentService, ap netip.AddrPort, weight int, res *Result) error {
	k := cs.vs.Key
	s := handles.ToService(cs.vs)
	ref := RealServerRef{k, ap}
	rs := desired.RealServer{Addr: ap.Addr(), Port: ap.Port()}
	if k.Protocol == v1.ProtocolTCP {
		if weight != 0 {
			if err := r.opts.IPVS.UpdateDestination(s, handles.ToDestination(rs)); err != nil {
				return fmt.Errorf("setting weight 0 of retiring real server %s in IPVS service %s: %w", ap, k, err)
			}
			cs.dests[ap] = 0
		}
		if _, ok := r.draining[ref]; !ok {
			r.draining[ref] = r.opts.Clock.Now()
		}
		return nil
	}
	if err := r.opts.IPVS.DelDestination(s, handles.ToDestination(rs)); err != nil && !handles.IsNotFound(err) {
		return fmt.Errorf("deleting real server %s from IPVS service %s: %w", ap, k, err)
	}
	delete(cs.dests, ap)
	res.RemovedRealServers = append(res.RemovedRealServers, ref)
	return nil
}
