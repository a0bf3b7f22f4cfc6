package reconcile

import (
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// currentService is a virtual server as the kernel holds it.
type currentService struct {
	vs    desired.VirtualServer
	dests map[netip.AddrPort]int // weight
}

// currentSet is one of the mode's sets as the kernel holds it.
type currentSet struct {
	members map[desired.Entry]bool
	// applied, when valid, is the member list members was last made equal
	// to: a sync wanting the same list skips the set without a lookup.
	applied      []desired.Entry
	appliedValid bool
}

// current is what the kernel holds of this family's owned state.
type current struct {
	services map[desired.Key]*currentService
	addrs    map[netip.Addr]bool
	// sets maps each of the mode's sets by name.
	sets map[string]*currentSet
	// applied records, in key order, each virtual server as syncService
	// last brought it in line (see applied.go); empty after a read.
	applied []appliedService
	// cover holds every bound address (see addrs.go); void after a read.
	cover addrCover
}

// read loads the owned state from the kernel, creating the link and the
// sets when missing.
func (r *Reconciler) read() (*current, error) {
	cur := &current{
		services: make(map[desired.Key]*currentService),
		addrs:    make(map[netip.Addr]bool),
		sets:     make(map[string]*currentSet),
	}
	list, err := r.opts.IPVS.GetServices()
	if err != nil {
		return nil, fmt.Errorf("listing IPVS services: %w", err)
	}
	for _, s := range list {
		vs, ok := handles.FromService(s)
		if !ok || !r.owned(vs.Key) {
			continue
		}
		dests, err := r.opts.IPVS.GetDestinations(s)
		if err != nil {
			return nil, fmt.Errorf("listing real servers of IPVS service %s: %w", vs.Key, err)
		}
		cs := &currentService{vs: vs, dests: make(map[netip.AddrPort]int, len(dests))}
		for _, d := range dests {
			if rs, ok := handles.FromDestination(d); ok {
				cs.dests[rs.AddrPort()] = rs.Weight
			}
		}
		cur.services[vs.Key] = cs
	}
	if err := r.opts.Link.EnsureLink(); err != nil {
		return nil, fmt.Errorf("ensuring link %s: %w", handles.DummyLink, err)
	}
	addrs, err := r.opts.Link.Addrs()
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", handles.DummyLink, err)
	}
	for _, a := range addrs {
		if a.Is6() == (r.opts.Family == ipfamily.IPv6) {
			cur.addrs[a] = true
		}
	}
	for _, spec := range desired.SetSpecs(r.opts.Family) {
		if err := r.opts.IPSets.Create(spec); err != nil && !handles.IsExist(err) {
			return nil, fmt.Errorf("creating ipset %s: %w", spec.Name, err)
		}
		members, err := r.opts.IPSets.List(spec.Name)
		if err != nil {
			return nil, fmt.Errorf("listing ipset %s: %w", spec.Name, err)
		}
		m := make(map[desired.Entry]bool, len(members))
		for _, e := range members {
			m[e] = true
		}
		cur.sets[spec.Name] = &currentSet{members: m}
	}
	// Drains whose real server is gone or back need no more watching.
	for ref := range r.draining {
		cs := cur.services[ref.VirtualServer]
		if cs == nil {
			delete(r.draining, ref)
			continue
		}
		if w, ok := cs.dests[ref.RealServer]; !ok || w != 0 {
			delete(r.draining, ref)
		}
	}
	return cur, nil
}
