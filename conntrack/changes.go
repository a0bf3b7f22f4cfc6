package conntrack

import (
	"slices"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// FiltersFor returns the filters that delete the UDP and SCTP flows a sync
// made stale. prev is the snapshot of the previous successful sync (nil
// before the first), snap the one just synced and changes what that sync
// applied (merged over failed syncs, so it covers everything since prev).
//
//   - A removed service port: every flow to each of its destinations.
//   - A destination a surviving port no longer has (an external IP
//     dropped, the port number or node port changed): every flow to it.
//   - An endpoint removed or no longer serving: the flows it answers, to
//     each destination of its port. Skipped when it serves again by now.
//   - A port that went from no serving endpoint to some (or is new): the
//     flows no NAT rewrote, that is the ones that were refused or sent
//     before the port existed. Flows already translated to an endpoint are
//     left alone, so a restart does not move healthy flows; the
//     reconciliation catches translated flows that are wrong.
//
// The result is sorted and holds no filter another one already covers.
func FiltersFor(prev, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) []Filter {
	if changes == nil {
		return nil
	}
	set := filterSet{}
	for _, old := range changes.Removed {
		if proto, ok := cleanedProtocol(old.Name); ok {
			for _, dst := range destinationsOf(old) {
				set.add(AllFlowsTo(proto, dst))
			}
		}
	}
	for _, name := range changes.Changed {
		proto, ok := cleanedProtocol(name)
		if !ok {
			continue
		}
		old, hadOld := prev.Get(name)
		cur, hasCur := snap.Get(name)
		if !hadOld || !hasCur {
			continue // added, or removed (above)
		}
		kept := destinationsOf(cur)
		for _, dst := range destinationsOf(old) {
			if !slices.Contains(kept, dst) {
				set.add(AllFlowsTo(proto, dst))
			}
		}
	}
	for _, stale := range changes.StaleEndpoints {
		proto, ok := cleanedProtocol(stale.ServicePort)
		cur, exists := snap.Get(stale.ServicePort)
		ep := stale.Endpoint.AddrPort()
		if !ok || !exists || serves(cur, ep) {
			continue // a removed port's destinations are cleared whole
		}
		fam := ipfamily.Of(ep.Addr())
		for _, dst := range destinationsOf(cur) {
			if dst.Family == fam {
				set.add(FlowsAnsweredBy(proto, dst, ep))
			}
		}
	}
	for _, name := range changes.NewlyServed {
		proto, ok := cleanedProtocol(name)
		cur, exists := snap.Get(name)
		if !ok || !exists {
			continue
		}
		for _, dst := range destinationsOf(cur) {
			set.add(UntranslatedFlowsTo(proto, dst))
		}
	}
	return set.list()
}

// filterSet collects filters without duplicates.
type filterSet map[Filter]struct{}

func (s filterSet) add(f Filter) { s[f] = struct{}{} }

// list returns the filters sorted, leaving out those an AnyAnswer filter
// for the same protocol and destination already covers.
func (s filterSet) list() []Filter {
	out := make([]Filter, 0, len(s))
	for f := range s {
		if f.Answer != AnyAnswer {
			if _, covered := s[AllFlowsTo(f.Protocol, f.Dst)]; covered {
				continue
			}
		}
		out = append(out, f)
	}
	slices.SortFunc(out, compareFilters)
	return out
}
