package ipvswalk

import (
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/trace"
)

// Walker walks packets through one desired state.
type Walker struct {
	rules    *trace.Rules
	node     trace.Node
	dump     string
	services map[serviceKey]*desired.Service
}

// serviceKey finds a virtual server by the tracer's protocol and address.
type serviceKey struct {
	protocol string
	addr     netip.AddrPort
}

// New prepares walks through st on a node whose own addresses of st's
// family, on every interface but kube-ipvs0 and loopback included, are
// localAddrs (desired.Config.LocalAddrs).
func New(st *desired.State, localAddrs []netip.Addr) (*Walker, error) {
	if st == nil {
		return nil, fmt.Errorf("walk: no state")
	}
	dump, err := renderDump(st)
	if err != nil {
		return nil, fmt.Errorf("walk: %w", err)
	}
	rules, err := trace.Load(dump, st.Family)
	if err != nil {
		return nil, fmt.Errorf("walk: reading the rendered %s rules: %w", st.Family, err)
	}
	w := &Walker{rules: rules, node: traceNode(st, localAddrs), dump: dump, services: map[serviceKey]*desired.Service{}}
	for i := range st.Services {
		svc := &st.Services[i]
		w.services[serviceKey{protocol(string(svc.Protocol)), netip.AddrPortFrom(svc.Addr, svc.Port)}] = svc
	}
	return w, nil
}

// Walk is New then Walker.Walk, for one packet.
func Walk(st *desired.State, localAddrs []netip.Addr, pkt trace.Packet) (Result, error) {
	w, err := New(st, localAddrs)
	if err != nil {
		return Result{}, err
	}
	return w.Walk(pkt)
}

// Dump returns the iptables-save text the walker traces through.
func (w *Walker) Dump() string { return w.dump }

// Walk says where pkt, a new connection's first packet, lands.
func (w *Walker) Walk(pkt trace.Packet) (Result, error) {
	tr, err := w.rules.Run(pkt, w.node)
	if err != nil {
		return Result{}, fmt.Errorf("walk: %w", err)
	}
	res := Result{Packet: pkt, Verdict: tr.Verdict}
	for _, p := range tr.Paths {
		res.Landings = append(res.Landings, w.landing(p, pkt.Protocol))
	}
	return res, nil
}

func (w *Walker) landing(p trace.Path, proto string) Landing {
	l := Landing{
		Verdict:     p.Verdict,
		Probability: p.Probability,
		Destination: p.Destination,
		Masqueraded: p.Masqueraded,
		Delivered:   p.Delivered,
		Rules:       p.Rules,
	}
	if p.VirtualServer.IsValid() {
		l.Service = w.services[serviceKey{proto, p.VirtualServer}]
	}
	if l.Service != nil {
		for _, rs := range l.Service.RealServers {
			if rs.AddrPort() == p.Destination {
				l.RealServer = rs
			}
		}
	}
	if p.Verdict != trace.Accepted && len(p.Rules) > 0 {
		l.By = p.Rules[len(p.Rules)-1]
	}
	return l
}
