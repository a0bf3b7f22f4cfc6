package ipvswalk

import (
	"fmt"
	"net/netip"
	"strings"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/trace"
)

// Result is every way one packet can end.
type Result struct {
	Packet trace.Packet
	// Verdict is the verdict all landings share, or trace.Mixed.
	Verdict  trace.Verdict
	Landings []Landing
}

// Landing is one way the packet can end.
type Landing struct {
	Verdict     trace.Verdict
	Probability float64
	// Service is the virtual server IPVS took the packet with: it
	// scheduled it to RealServer, or refused it for want of real servers.
	// Nil when IPVS did not take the packet. It points into the walked
	// state, which must not be changed.
	Service *desired.Service
	// RealServer is the real server IPVS picked (zero when it picked none).
	RealServer desired.RealServer
	// Destination is where the packet is addressed when the landing ends.
	Destination netip.AddrPort
	// Masqueraded: the packet leaves with the node's address as source.
	Masqueraded bool
	// Delivered: to a socket on the node itself.
	Delivered bool
	// By is what dropped or rejected the packet: its last rule ("filter:
	// -A KUBE-IPVS-FILTER ...", "filter: INPUT policy DROP") or IPVS's
	// refusal ("ipvs: ..."). Empty for an accepted landing.
	By string
	// Rules are every rule the packet matched on the way, in order.
	Rules []string
}

// RealServers sums, per real server, the probability of the accepted
// landings IPVS sent there.
func (r Result) RealServers() map[netip.AddrPort]float64 {
	out := map[netip.AddrPort]float64{}
	for _, l := range r.Landings {
		if l.Verdict == trace.Accepted && l.Service != nil {
			out[l.RealServer.AddrPort()] += l.Probability
		}
	}
	return out
}

// String renders the walk for test failure messages: the packet, then one
// line per landing with the rules it matched, indented.
func (r Result) String() string {
	var b strings.Builder
	p := r.Packet
	fmt.Fprintf(&b, "%s %s -> %s (%s): %s\n", p.Protocol, p.Source, netip.AddrPortFrom(p.Destination, p.DestinationPort), p.Entry, r.Verdict)
	for _, l := range r.Landings {
		fmt.Fprintf(&b, "  p=%.4f %s\n", l.Probability, l.summary())
		for _, rule := range l.Rules {
			fmt.Fprintf(&b, "      %s\n", rule)
		}
	}
	return b.String()
}

// summary is one landing in a line.
func (l Landing) summary() string {
	var s string
	switch {
	case l.Verdict != trace.Accepted:
		s = fmt.Sprintf("%s at %s by %s", l.Verdict, l.Destination, l.By)
	case l.Service != nil:
		s = fmt.Sprintf("accepted: %s (%s) -> %s weight %d", desired.DescribeVirtualServer(l.Service.VirtualServer),
			l.Service.Owner, l.RealServer.AddrPort(), l.RealServer.Weight)
	case l.Delivered:
		s = fmt.Sprintf("accepted: delivered to %s on the node, no virtual server", l.Destination)
	default:
		s = fmt.Sprintf("accepted: routed on to %s, no virtual server", l.Destination)
	}
	if l.Service != nil && l.Delivered {
		s += ", on the node"
	}
	if l.Masqueraded {
		s += ", masqueraded"
	}
	return s
}
