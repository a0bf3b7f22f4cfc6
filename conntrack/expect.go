package conntrack

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Dataplane says how the mode answers a service's flows, which decides what
// a healthy conntrack entry looks like.
type Dataplane uint8

const (
	// KernelNAT (iptables, ipvs): the kernel DNATs each flow straight to an
	// endpoint, so a healthy flow is answered by a serving endpoint.
	KernelNAT Dataplane = iota
	// LocalRelays (userspace): portal rules REDIRECT or DNAT each flow to a
	// relay of this process, so a healthy flow is answered from a node
	// address and a port a socket is bound to.
	LocalRelays
)

func (d Dataplane) String() string {
	if d == LocalRelays {
		return "local relays"
	}
	return "kernel NAT"
}

// Expectations are what reconciliation holds one family's UDP flows to:
// every service destination of a snapshot, with its serving endpoints.
type Expectations struct {
	Dataplane Dataplane
	// Endpoints maps each UDP destination to its serving endpoints (used
	// with KernelNAT; an empty list means no flow to it is healthy).
	Endpoints map[Destination][]netip.AddrPort
	// BoundPorts lists the local UDP ports with a socket (used with
	// LocalRelays); nil means unknown, and any port passes.
	BoundPorts []uint16
}

// ExpectationsOf builds fam's expectations from snap. It returns nil when
// snap has no UDP destination in fam, as there is then nothing to reconcile.
func ExpectationsOf(snap *servicemap.Snapshot, fam ipfamily.Family, dp Dataplane, boundPorts []uint16) *Expectations {
	e := &Expectations{Dataplane: dp, Endpoints: map[Destination][]netip.AddrPort{}, BoundPorts: boundPorts}
	for name, sp := range snap.All() {
		if name.Protocol != v1.ProtocolUDP {
			continue
		}
		eps := servingEndpoints(sp, fam)
		for _, dst := range destinationsOf(sp) {
			if dst.Family == fam {
				e.Endpoints[dst] = append(e.Endpoints[dst], eps...)
			}
		}
	}
	if len(e.Endpoints) == 0 {
		return nil
	}
	return e
}

// compiledExpectations answers "is this flow healthy" in constant time.
type compiledExpectations struct {
	dataplane Dataplane
	endpoints map[Destination]map[netip.AddrPort]struct{}
	bound     map[uint16]struct{} // nil: any port
}

func (e *Expectations) compile() *compiledExpectations {
	c := &compiledExpectations{dataplane: e.Dataplane, endpoints: make(map[Destination]map[netip.AddrPort]struct{}, len(e.Endpoints))}
	for dst, eps := range e.Endpoints {
		set := make(map[netip.AddrPort]struct{}, len(eps))
		for _, ep := range eps {
			set[ep] = struct{}{}
		}
		c.endpoints[dst] = set
	}
	if e.BoundPorts != nil {
		c.bound = make(map[uint16]struct{}, len(e.BoundPorts))
		for _, p := range e.BoundPorts {
			c.bound[p] = struct{}{}
		}
	}
	return c
}

// stale says whether flow, sent to dst (one of the expected destinations),
// is not answered the way the dataplane answers it.
func (c *compiledExpectations) stale(flow Flow, eps map[netip.AddrPort]struct{}, local func(netip.Addr) bool) bool {
	if c.dataplane == LocalRelays {
		if !flow.translated() || !local(flow.ReplySrc.Addr()) {
			return true
		}
		if c.bound == nil {
			return false
		}
		_, ok := c.bound[flow.ReplySrc.Port()]
		return !ok
	}
	_, ok := eps[flow.ReplySrc]
	return !ok
}
