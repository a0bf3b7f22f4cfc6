package trace

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Entry is where a packet enters the node's netfilter hooks.
type Entry uint8

const (
	// Forwarded packets arrive from another host or a pod.
	Forwarded Entry = iota + 1
	// Local packets are sent by a process on the node.
	Local
)

func (e Entry) String() string {
	switch e {
	case Forwarded:
		return "forwarded"
	case Local:
		return "local"
	}
	return fmt.Sprintf("Entry(%d)", uint8(e))
}

// Packet is the first packet of a new connection.
type Packet struct {
	Source, Destination netip.Addr
	// Protocol is "tcp", "udp" or "sctp".
	Protocol        string
	DestinationPort uint16
	// SourcePort is only needed by rules matching on it (0: unknown).
	SourcePort uint16
	Entry      Entry
	// InInterface is the interface a Forwarded packet arrives on; only
	// needed by rules matching on it.
	InInterface string
	// OutInterface is the interface routing sends the packet out of, when
	// it leaves the node; only needed by rules matching on it.
	OutInterface string
	// Mark is the packet's firewall mark on entry (normally 0).
	Mark uint32
	// BridgePort is the bridge port a Forwarded packet came in through when
	// InInterface is a bridge whose routed traffic iptables sees (bridge
	// netfilter): what "-m physdev" tests. "" for a packet that crossed no
	// bridge, which is what a Local packet always is.
	BridgePort string
}

// Node is what the tracer needs to know about the node.
type Node struct {
	// LocalAddresses are the node's addresses: with the loopback ones, they
	// are what "-m addrtype --dst-type LOCAL" matches, and a destination
	// among them is delivered locally (filter INPUT) rather than forwarded.
	LocalAddresses []netip.Addr
	// Interfaces lists addresses per interface, optional: needed for
	// "--limit-iface-in", and gives REDIRECT in PREROUTING the address of
	// the interface the packet came in on (else the node's first local
	// address of the family is used).
	Interfaces map[string][]netip.Addr
	// Sets are the node's ipsets by name, for "-m set" rules. Nil: the
	// tracer refuses such rules, as it cannot know what they match.
	Sets map[string]IPSet
	// VirtualServers is the node's IPVS table (nil: no IPVS). IPVS
	// schedules a new connection to one of them to a real server; see the
	// package documentation for where.
	VirtualServers []VirtualServer
}

// Verdict is what becomes of a packet.
type Verdict uint8

const (
	Accepted Verdict = iota + 1
	Dropped
	Rejected
	// Mixed is a Result's verdict when its paths end differently.
	Mixed
)

func (v Verdict) String() string {
	switch v {
	case Accepted:
		return "accepted"
	case Dropped:
		return "dropped"
	case Rejected:
		return "rejected"
	case Mixed:
		return "mixed"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Path is one way the packet can go: each random choice made by a
// "-m statistic" rule starts a new one.
type Path struct {
	Verdict Verdict
	// Probability that the packet takes this path.
	Probability float64
	// Destination is where the packet is addressed when the path ends:
	// after DNAT or REDIRECT, if one applied.
	Destination netip.AddrPort
	// Translated: a DNAT or REDIRECT rewrote the destination; Redirected:
	// it was a REDIRECT (to the node itself).
	Translated, Redirected bool
	// Delivered: the packet is for the node itself (a local socket), rather
	// than forwarded, sent on by IPVS or sent out.
	Delivered bool
	// Masqueraded: a MASQUERADE rule in nat POSTROUTING matched it. SNAT is
	// the address of an SNAT rule that matched instead.
	Masqueraded bool
	SNAT        netip.Addr
	// Mark is the packet's firewall mark when the path ends.
	Mark uint32
	// VirtualServer is the IPVS virtual server (of the packet's protocol)
	// that took the packet: scheduled it to Destination or, for a Rejected
	// path ending at IPVS, refused it. Invalid when IPVS did not take it.
	VirtualServer netip.AddrPort
	// AffinityChecked names the recent lists (session affinity) checked
	// and assumed empty; AffinitySet those the packet was added to.
	AffinityChecked, AffinitySet []string
	// Rules are the rules that matched, in order, each as
	// "table: -A CHAIN ..." (and "table: CHAIN policy P" where a built-in
	// chain's policy decided), for failure messages.
	Rules []string
}

// Result is every path of one packet.
type Result struct {
	// Verdict is the verdict all paths share, or Mixed.
	Verdict Verdict
	Paths   []Path
}

// Destinations sums, per destination, the probability of the accepted paths
// reaching it.
func (r Result) Destinations() map[netip.AddrPort]float64 {
	out := map[netip.AddrPort]float64{}
	for _, p := range r.Paths {
		if p.Verdict == Accepted {
			out[p.Destination] += p.Probability
		}
	}
	return out
}

// String renders the result for test failure messages: one line per path,
// then the rules it matched, indented.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d path(s)\n", r.Verdict, len(r.Paths))
	for _, p := range r.Paths {
		fmt.Fprintf(&b, "  %s p=%.4f to %s", p.Verdict, p.Probability, p.Destination)
		flags := map[string]bool{"translated": p.Translated, "redirected": p.Redirected, "delivered": p.Delivered, "masqueraded": p.Masqueraded}
		for _, k := range slices.Sorted(maps.Keys(flags)) {
			if flags[k] {
				b.WriteString(" " + k)
			}
		}
		if p.SNAT.IsValid() {
			fmt.Fprintf(&b, " snat=%s", p.SNAT)
		}
		if p.Mark != 0 {
			fmt.Fprintf(&b, " mark=%#x", p.Mark)
		}
		if p.VirtualServer.IsValid() {
			fmt.Fprintf(&b, " ipvs=%s", p.VirtualServer)
		}
		if len(p.AffinityChecked) > 0 {
			fmt.Fprintf(&b, " affinity-checked=%s", strings.Join(p.AffinityChecked, ","))
		}
		b.WriteByte('\n')
		for _, rule := range p.Rules {
			fmt.Fprintf(&b, "      %s\n", rule)
		}
	}
	return b.String()
}
