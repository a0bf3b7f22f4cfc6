package trace

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/internal/rulespec"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// match evaluates a rule's conditions for f, in netfilter's order (the
// address, protocol and interface tests, then each -m in turn, stopping at
// the first that fails). hit is f as it continues when the rule matches,
// miss as it continues when it does not; either is nil when that cannot
// happen. Both are set when a random rule matches with a probability
// strictly between 0 and 1; their probabilities are then split.
func (w *walker) match(r *rule, f flow) (hit, miss *flow, err error) {
	p := r.parsed
	ok, err := w.basic(p, f)
	if err != nil || !ok {
		return nil, &f, err
	}
	chance := 1.0
	var sets []string
	for _, m := range p.Matches {
		var pass float64
		switch m.Name {
		case "statistic":
			pass, err = statistic(m)
		case "recent":
			var name string
			var isSet bool
			pass, name, isSet, err = recent(m)
			switch {
			case err != nil:
			case isSet:
				sets = append(sets, name)
			default:
				f = f.withAffinityChecked(name)
			}
		default:
			var ok bool
			ok, err = w.module(m, f)
			pass = boolChance(ok)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("-m %s: %w", m.Name, err)
		}
		if chance *= pass; chance == 0 {
			return nil, &f, nil
		}
	}
	matched := f
	for _, s := range sets {
		matched = matched.withAffinitySet(s)
	}
	if chance == 1 {
		return &matched, nil, nil
	}
	missed := f
	matched.prob *= chance
	missed.prob *= 1 - chance
	return &matched, &missed, nil
}

func boolChance(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

// basic evaluates -s, -d, -p, -i and -o.
func (w *walker) basic(p *rulespec.Rule, f flow) (bool, error) {
	if m := p.Source; m != nil && m.Prefix.Contains(f.pkt.Source) == m.Negated {
		return false, nil
	}
	if m := p.Destination; m != nil && m.Prefix.Contains(f.dst) == m.Negated {
		return false, nil
	}
	if m := p.Protocol; m != nil && protocolIs(m.Name, f.pkt.Protocol) == m.Negated {
		return false, nil
	}
	for _, iface := range []struct {
		m           *rulespec.NameMatch
		name, field string
	}{{p.InInterface, f.in, "InInterface"}, {p.OutInterface, f.out, "OutInterface"}} {
		if iface.m == nil {
			continue
		}
		if iface.name == unknownInterface {
			return false, fmt.Errorf("the rule tests an interface but Packet.%s is not set", iface.field)
		}
		if rulespec.InterfaceMatches(iface.m.Name, iface.name) == iface.m.Negated {
			return false, nil
		}
	}
	return true, nil
}

// unknownInterface marks an interface the hook has but the Packet does not
// name.
const unknownInterface = "\x00unknown"

func protocolIs(rule, pkt string) bool {
	switch rule {
	case "all", "0":
		return true
	case "6":
		rule = "tcp"
	case "17":
		rule = "udp"
	case "132":
		rule = "sctp"
	}
	return rule == pkt
}

// module evaluates a deterministic -m extension.
func (w *walker) module(m rulespec.Match, f flow) (bool, error) {
	switch m.Name {
	case "comment", "nfacct": // nfacct only counts
		return true, nil
	case "tcp", "udp", "sctp":
		return allOptions(m, func(o rulespec.Option) (bool, error) {
			if o.Name == "--dport" {
				return portIn(o.Arg, f.dport)
			}
			if f.pkt.SourcePort == 0 {
				return false, fmt.Errorf("%s needs Packet.SourcePort", o.Name)
			}
			return portIn(o.Arg, f.pkt.SourcePort)
		})
	case "addrtype":
		return w.addrtype(m, f)
	case "mark":
		o, _ := rulespec.FindOption(m.Options, "--mark")
		value, mask, err := rulespec.ParseMark(o.Arg)
		return (f.mark&mask == value) != o.Negated, err
	case "conntrack":
		return allOptions(m, func(o rulespec.Option) (bool, error) { return conntrack(o, f) })
	case "state":
		o, _ := rulespec.FindOption(m.Options, "--state")
		return newConnectionIn(o.Arg, f) != o.Negated, nil
	case "set":
		return w.matchSet(m, f)
	case "ipvs":
		return matchIPVS(m, f)
	case "physdev":
		return physdev(m, f)
	}
	return false, fmt.Errorf("match %q is not modelled", m.Name)
}

// physdev evaluates "-m physdev" for --physdev-is-in and --physdev-in,
// from Packet.BridgePort; like xt_physdev, a packet that crossed no
// bridge fails them unless negated.
func physdev(m rulespec.Match, f flow) (bool, error) {
	port := f.pkt.BridgePort
	return allOptions(m, func(o rulespec.Option) (bool, error) {
		switch o.Name {
		case "--physdev-is-in":
			return port != "", nil
		case "--physdev-in":
			return port != "" && rulespec.InterfaceMatches(o.Arg, port), nil
		}
		return false, fmt.Errorf("not modelled")
	})
}

// allOptions says whether every option holds (negation applied by the
// caller's test, not here: each test sees the option whole).
func allOptions(m rulespec.Match, holds func(rulespec.Option) (bool, error)) (bool, error) {
	for _, o := range m.Options {
		ok, err := holds(o)
		if err != nil {
			return false, fmt.Errorf("%s %s: %w", o.Name, o.Arg, err)
		}
		if ok == o.Negated {
			return false, nil
		}
	}
	return true, nil
}

func portIn(spec string, port uint16) (bool, error) {
	lo, hi, err := rulespec.ParsePortRange(spec)
	return port >= lo && port <= hi, err
}

// newConnectionIn says whether a new connection's conntrack state is in a
// --ctstate/--state list: NEW always, DNAT once rewritten, nothing else.
func newConnectionIn(list string, f flow) bool {
	return rulespec.ListContains(list, "NEW") || (f.dnat && rulespec.ListContains(list, "DNAT"))
}

func conntrack(o rulespec.Option, f flow) (bool, error) {
	switch o.Name {
	case "--ctstate":
		return newConnectionIn(o.Arg, f), nil
	case "--ctorigdst", "--ctorigsrc":
		addr := f.pkt.Destination
		if o.Name == "--ctorigsrc" {
			addr = f.pkt.Source
		}
		prefix, err := rulespec.ParsePrefix(o.Arg, ipfamily.Of(addr))
		return prefix.Contains(addr), err
	case "--ctorigdstport":
		return portIn(o.Arg, f.pkt.DestinationPort)
	case "--ctdir":
		// A new connection's first packet goes the original way.
		return o.Arg == "ORIGINAL", nil
	case "--ctorigsrcport":
		if f.pkt.SourcePort == 0 {
			return false, fmt.Errorf("needs Packet.SourcePort")
		}
		return portIn(o.Arg, f.pkt.SourcePort)
	}
	return false, fmt.Errorf("not modelled")
}

// addrtype evaluates --src-type/--dst-type; only LOCAL is modelled.
func (w *walker) addrtype(m rulespec.Match, f flow) (bool, error) {
	_, limitIn := rulespec.FindOption(m.Options, "--limit-iface-in")
	if _, ok := rulespec.FindOption(m.Options, "--limit-iface-out"); ok {
		return false, fmt.Errorf("--limit-iface-out is not modelled")
	}
	local := w.node.isLocal
	if limitIn {
		if f.in == "" || f.in == unknownInterface {
			return false, fmt.Errorf("--limit-iface-in needs the packet's input interface (Packet.InInterface)")
		}
		addrs, ok := w.node.Interfaces[f.in]
		if !ok && f.in != "lo" {
			return false, fmt.Errorf("--limit-iface-in needs Node.Interfaces[%q]", f.in)
		}
		local = func(a netip.Addr) bool { return slices.Contains(addrs, a) || (f.in == "lo" && a.IsLoopback()) }
	}
	return allOptions(m, func(o rulespec.Option) (bool, error) {
		if o.Name == "--limit-iface-in" {
			return !o.Negated, nil
		}
		if o.Arg != "LOCAL" {
			return false, fmt.Errorf("address type %s is not modelled (only LOCAL)", o.Arg)
		}
		if o.Name == "--src-type" {
			return local(f.pkt.Source), nil
		}
		return local(f.dst), nil
	})
}

// isLocal says whether a is one of the node's addresses (addrtype LOCAL).
func (n Node) isLocal(a netip.Addr) bool {
	return a.IsLoopback() || slices.Contains(n.LocalAddresses, a)
}

// statistic is the chance a "-m statistic" matches.
func statistic(m rulespec.Match) (float64, error) {
	mode, _ := rulespec.FindOption(m.Options, "--mode")
	if mode.Arg != "random" {
		return 0, fmt.Errorf("--mode %s is not modelled (only random)", mode.Arg)
	}
	o, _ := rulespec.FindOption(m.Options, "--probability")
	p, err := rulespec.ParseProbability(o.Arg)
	if o.Negated {
		p = 1 - p
	}
	return p, err
}

// recent evaluates "-m recent" for a client never seen: --set matches (and
// adds it to the list), --rcheck, --update and --remove find no entry.
func recent(m rulespec.Match) (chance float64, list string, isSet bool, err error) {
	list = "DEFAULT"
	if o, ok := rulespec.FindOption(m.Options, "--name"); ok {
		list = o.Arg
	}
	for _, o := range m.Options {
		switch o.Name {
		case "--set":
			if o.Negated {
				return 0, list, true, fmt.Errorf("! --set is not modelled")
			}
			return 1, list, true, nil
		case "--rcheck", "--update", "--remove":
			return boolChance(o.Negated), list, false, nil
		}
	}
	return 0, list, false, fmt.Errorf("no --set, --rcheck, --update or --remove in %s", strings.TrimSpace(fmt.Sprint(m.Options)))
}
