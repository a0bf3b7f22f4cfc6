package reconcile

import (
	"slices"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

// An incremental sync visits only what changed, so its Go cost follows the
// change as its netlink cost does. The current view keeps, in key order,
// each wanted virtual server as syncService last brought it in line
// (current.applied). While the reconciler trusts that view (no re-read and
// no failure since: a failure drops it), a virtual server wanted exactly as
// then needs nothing from syncService: its wanted real servers are in place
// at their weights and not draining, the unwanted ones are retired already
// (drains run apart), and its address is still bound unless this sync
// unbound it. Desired states list services in key order, so one pass over
// both lists, with no map, finds what changed (plan.go). Sets are recorded
// alike, as whole member lists (sets.go), and addresses through a cover of
// the bound ones (addrs.go). A read starts every record afresh, so a full
// sync still visits everything.

// appliedService is a virtual server as syncService last brought it in
// line. Real servers are copied: the desired state is the caller's, who
// may reuse it.
type appliedService struct {
	vs          desired.VirtualServer
	bind        bool
	realServers []desired.RealServer
}

func appliedFrom(want *desired.Service) appliedService {
	return appliedService{vs: want.VirtualServer, bind: want.Bind, realServers: slices.Clone(want.RealServers)}
}

// matches reports whether want asks exactly for what was applied.
func (a *appliedService) matches(want *desired.Service) bool {
	return a.vs == want.VirtualServer && a.bind == want.Bind && slices.Equal(a.realServers, want.RealServers)
}

// rebuildApplied returns applied without the entries at the drop indices
// (ascending) and with added (sorted by key, none already there) in place.
func rebuildApplied(applied []appliedService, drop []int, added []appliedService) []appliedService {
	switch {
	case len(drop) == 0 && len(added) == 0:
		return applied
	case len(drop) == len(applied):
		return added // all new, as after a read
	}
	out := make([]appliedService, 0, len(applied)-len(drop)+len(added))
	next := 0
	for _, a := range added {
		at, _ := slices.BinarySearchFunc(applied, a.vs.Key, func(x appliedService, k desired.Key) int { return x.vs.Key.Compare(k) })
		out, drop = appendKept(out, applied[:at], next, drop)
		out = append(out, a)
		next = at
	}
	out, _ = appendKept(out, applied, next, drop)
	return out
}

// appendKept appends applied[from:] to out but for the indices in drop
// (ascending), and returns the drop indices beyond applied.
func appendKept(out, applied []appliedService, from int, drop []int) ([]appliedService, []int) {
	for len(drop) > 0 && drop[0] < len(applied) {
		out = append(out, applied[from:drop[0]]...)
		from = drop[0] + 1
		drop = drop[1:]
	}
	return append(out, applied[from:]...), drop
}
