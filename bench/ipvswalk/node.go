package ipvswalk

import (
	"net/netip"
	"slices"
	"strings"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/trace"
)

// traceNode describes the node the state would leave behind, for the
// tracer: its own addresses plus those bound on kube-ipvs0, every set with
// its members, every virtual server with its real servers.
func traceNode(st *desired.State, localAddrs []netip.Addr) trace.Node {
	n := trace.Node{
		LocalAddresses: slices.Concat(localAddrs, st.Addresses),
		Sets:           make(map[string]trace.IPSet, len(st.Sets)),
		VirtualServers: make([]trace.VirtualServer, 0, len(st.Services)),
	}
	for _, s := range st.Sets {
		set := trace.IPSet{Type: s.Spec.Type, Members: make([]trace.SetMember, 0, len(s.Members))}
		if s.Spec.Type != desired.BitmapPort {
			set.Family = s.Spec.Family
		}
		for _, e := range s.Members {
			set.Members = append(set.Members, trace.SetMember{
				Addr: e.IP, Protocol: protocol(string(e.Protocol)), Port: e.Port, Addr2: e.IP2, Net: e.Net,
			})
		}
		n.Sets[s.Spec.Name] = set
	}
	for _, svc := range st.Services {
		vs := trace.VirtualServer{
			Protocol:  protocol(string(svc.Protocol)),
			Address:   netip.AddrPortFrom(svc.Addr, svc.Port),
			Scheduler: svc.Scheduler,
		}
		for _, rs := range svc.RealServers {
			vs.RealServers = append(vs.RealServers, trace.RealServer{Address: rs.AddrPort(), Weight: rs.Weight})
		}
		n.VirtualServers = append(n.VirtualServers, vs)
	}
	return n
}

// protocol is the tracer's spelling of a Kubernetes protocol ("TCP" ->
// "tcp").
func protocol(p string) string { return strings.ToLower(p) }
