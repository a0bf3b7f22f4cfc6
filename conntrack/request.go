package conntrack

import (
	"net/netip"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Request is one pass over one family's conntrack table: the flows its
// filters select, and, when Reconcile is set, the UDP flows to expected
// destinations that are not answered as expected, are deleted.
type Request struct {
	Family  ipfamily.Family
	Filters []Filter
	// Reconcile is nil when this pass does not reconcile.
	Reconcile *Expectations
	// Local lists the node's addresses. Node-port destinations only match
	// flows sent to one of them, and relays answer from them. Nil means
	// unknown: every address counts as the node's (kube-proxy matches node
	// ports on any address).
	Local []netip.Addr
}

// Empty says the request cannot select any flow, so no pass is needed.
func (r *Request) Empty() bool { return len(r.Filters) == 0 && r.Reconcile == nil }

// Matcher decides, flow by flow, what a Request deletes. Compile once per
// pass: lookups are by map, so a pass costs the same with one filter or
// thousands.
type Matcher struct {
	family    ipfamily.Family
	filters   map[matchKey][]Filter
	local     map[netip.Addr]struct{} // nil: any address
	reconcile *compiledExpectations
}

// matchKey is what a flow is looked up by: protocol and destination.
type matchKey struct {
	proto Protocol
	dst   Destination
}

// Matcher compiles the request.
func (r *Request) Matcher() *Matcher {
	m := &Matcher{family: r.Family, filters: make(map[matchKey][]Filter, len(r.Filters))}
	for _, f := range r.Filters {
		k := matchKey{f.Protocol, f.Dst}
		m.filters[k] = append(m.filters[k], f)
	}
	if r.Local != nil {
		m.local = make(map[netip.Addr]struct{}, len(r.Local))
		for _, a := range r.Local {
			m.local[a.Unmap()] = struct{}{}
		}
	}
	if r.Reconcile != nil {
		m.reconcile = r.Reconcile.compile()
	}
	return m
}

// isLocal says whether addr is one of the node's addresses.
func (m *Matcher) isLocal(addr netip.Addr) bool {
	if m.local == nil {
		return true
	}
	_, ok := m.local[addr]
	return ok
}

// Match says whether the request deletes flow.
func (m *Matcher) Match(flow Flow) bool {
	if !flow.OrigDst.Addr().IsValid() || ipfamily.Of(flow.OrigDst.Addr()) != m.family {
		return false
	}
	byAddr := ServiceAddress(flow.OrigDst)
	byNodePort := NodePortOf(m.family, flow.OrigDst.Port())
	onNode := m.isLocal(flow.OrigDst.Addr())
	if m.filtersMatch(byAddr, flow) || (onNode && m.filtersMatch(byNodePort, flow)) {
		return true
	}
	if m.reconcile == nil || flow.Protocol != UDP {
		return false
	}
	// A service address wins over a node port that happens to share its
	// port, as the modes' rules match service addresses first.
	eps, ok := m.reconcile.endpoints[byAddr]
	if !ok && onNode {
		eps, ok = m.reconcile.endpoints[byNodePort]
	}
	return ok && m.reconcile.stale(flow, eps, m.isLocal)
}

// filtersMatch says whether a filter for dst selects flow.
func (m *Matcher) filtersMatch(dst Destination, flow Flow) bool {
	for _, f := range m.filters[matchKey{flow.Protocol, dst}] {
		if f.matches(flow) {
			return true
		}
	}
	return false
}
