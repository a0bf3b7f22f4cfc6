package reconcile

import (
	"fmt"
	"net/netip"
	"slices"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// addrCover, when valid, lists (sorted, unique) addresses that include
// every bound one: the wanted addresses of the last sync that unbound the
// rest. A sync wanting the same list then has nothing to unbind, and one
// wanting another list need only look at the difference.
type addrCover struct {
	valid bool
	addrs []netip.Addr
}

// include keeps the cover true of a newly bound address; one outside it
// (a service binding an address the state does not list) voids it.
func (c *addrCover) include(a netip.Addr) {
	if _, found := slices.BinarySearchFunc(c.addrs, a, netip.Addr.Compare); !found {
		*c = addrCover{}
	}
}

// removeStaleAddrs unbinds the addresses nothing wants. It reports
// whether it unbound any: a service still binding one must then be visited.
func (r *Reconciler) removeStaleAddrs(want *desired.State) (unbound bool, errs []error) {
	cover := &r.cur.cover
	if cover.valid && slices.Equal(cover.addrs, want.Addresses) {
		return false, nil
	}
	sorted := sortedUnique(want.Addresses)
	var candidates []netip.Addr
	if cover.valid && sorted {
		candidates = missingFrom(cover.addrs, want.Addresses)
	} else {
		candidates = r.boundNotIn(want.Addresses)
	}
	for _, a := range candidates {
		if !r.cur.addrs[a] {
			continue
		}
		if err := r.opts.Link.DelAddr(a); err != nil && !handles.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("unbinding %s from %s: %w", a, handles.DummyLink, err))
			continue
		}
		delete(r.cur.addrs, a)
		unbound = true
	}
	*cover = addrCover{}
	if len(errs) == 0 && sorted {
		*cover = addrCover{valid: true, addrs: slices.Clone(want.Addresses)}
	}
	return unbound, errs
}

// boundNotIn lists the bound addresses want lacks.
func (r *Reconciler) boundNotIn(want []netip.Addr) []netip.Addr {
	keep := make(map[netip.Addr]bool, len(want))
	for _, a := range want {
		keep[a] = true
	}
	var out []netip.Addr
	for a := range r.cur.addrs {
		if !keep[a] {
			out = append(out, a)
		}
	}
	return out
}

// missingFrom lists the members of have that want lacks; both are sorted
// and unique.
func missingFrom(have, want []netip.Addr) []netip.Addr {
	var out []netip.Addr
	j := 0
	for _, a := range have {
		for j < len(want) && want[j].Less(a) {
			j++
		}
		if j == len(want) || want[j] != a {
			out = append(out, a)
		}
	}
	return out
}

func sortedUnique(as []netip.Addr) bool {
	for i := 1; i < len(as); i++ {
		if !as[i-1].Less(as[i]) {
			return false
		}
	}
	return true
}
