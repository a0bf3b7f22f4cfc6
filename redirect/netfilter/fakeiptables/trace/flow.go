package trace

import (
	"net/netip"
	"slices"
)

// flow is one path's state as it moves through the hooks. It is copied
// when a random rule splits a path; its slices are never appended to in
// place, so copies share nothing they change.
type flow struct {
	pkt Packet
	// dst and dport: the destination now, after any DNAT or REDIRECT.
	dst   netip.Addr
	dport uint16
	mark  uint32

	dnat, redirect bool
	masquerade     bool
	snat           netip.Addr
	// vs is the IPVS virtual server that scheduled the packet, once it has.
	vs netip.AddrPort

	prob float64
	// in and out are the interfaces the hook being walked sees: "" where
	// it has none, unknownInterface where the Packet does not say.
	in, out string

	rules           *trail
	affinityChecked []string
	affinitySet     []string
}

// trail is the list of rules a flow matched, newest first, shared between
// the flows split from one another.
type trail struct {
	prev *trail
	text string
}

func (f flow) matched(text string) flow {
	f.rules = &trail{prev: f.rules, text: text}
	return f
}

func (f flow) withAffinityChecked(name string) flow {
	f.affinityChecked = append(slices.Clip(f.affinityChecked), name)
	return f
}

func (f flow) withAffinitySet(name string) flow {
	f.affinitySet = append(slices.Clip(f.affinitySet), name)
	return f
}

func (f flow) path(v Verdict, delivered bool) Path {
	var rules []string
	for t := f.rules; t != nil; t = t.prev {
		rules = append(rules, t.text)
	}
	slices.Reverse(rules)
	return Path{
		Verdict:         v,
		Probability:     f.prob,
		Destination:     netip.AddrPortFrom(f.dst, f.dport),
		Translated:      f.dnat,
		Redirected:      f.redirect,
		Delivered:       delivered,
		Masqueraded:     f.masquerade,
		SNAT:            f.snat,
		Mark:            f.mark,
		VirtualServer:   f.vs,
		AffinityChecked: f.affinityChecked,
		AffinitySet:     f.affinitySet,
		Rules:           rules,
	}
}
