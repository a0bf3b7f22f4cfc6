package rulespec

// argKind says what an option's argument is, so Parse can refuse a bad one
// the way the real extension would.
type argKind uint8

const (
	noArg        argKind = iota
	textArg              // free text: a comment, a recent list's name
	portArg              // N or N:M
	markArg              // V or V/M, 32-bit
	fractionArg          // a probability, 0 to 1
	prefixArg            // an address of the rule's family, with an optional /len
	natAddrArg           // DNAT/SNAT: address[:port], IPv6 as [address]:port
	portNArg             // REDIRECT/MASQUERADE --to-ports: one port
	uintArg              // a count or a number of seconds
	maskArg              // an address mask of the rule's family (recent --mask)
	ctStatesArg          // conntrack --ctstate list
	ctDirArg             // conntrack --ctdir: ORIGINAL or REPLY
	statesArg            // state --state list
	addrTypesArg         // addrtype type list
	modeArg              // statistic --mode
	rejectArg            // REJECT --reject-with
	setArg               // set --match-set: two words, a set name and its src/dst flags
	protoNumArg          // ipvs --vproto: a protocol number, as iptables-save prints it
)

// optSpec is one option of a match or target extension.
type optSpec struct {
	name      string
	alias     string // a long spelling the tool also accepts
	arg       argKind
	negatable bool
}

// extSpec is one match or target extension as far as kproxy's modes use it.
type extSpec struct {
	opts []optSpec
	// proto: a protocol match (tcp, udp, sctp), which needs "-p <proto>".
	proto bool
	// tables, for a target: the tables whose chains may use it (nil: all).
	tables []string
}

func (s extSpec) option(name string) (optSpec, bool) {
	for _, o := range s.opts {
		if o.name == name || (o.alias != "" && o.alias == name) {
			return o, true
		}
	}
	return optSpec{}, false
}

// Matches lists the match extensions Parse knows, for messages.
func Matches() []string {
	return []string{"addrtype", "comment", "conntrack", "ipvs", "mark", "nfacct", "physdev", "recent", "sctp", "set", "socket", "state", "statistic", "tcp", "udp"}
}

// matchSpec describes the match extensions kproxy's modes emit.
func matchSpec(name string) (extSpec, bool) {
	ports := []optSpec{
		{name: "--dport", alias: "--destination-port", arg: portArg, negatable: true},
		{name: "--sport", alias: "--source-port", arg: portArg, negatable: true},
	}
	switch name {
	case "comment":
		return extSpec{opts: []optSpec{{name: "--comment", arg: textArg}}}, true
	case "socket":
		// A socket lookup (the userspace portals' guard): the fake parses
		// it; only the kernel can evaluate it.
		return extSpec{opts: []optSpec{{name: "--transparent", arg: noArg}, {name: "--nowildcard", arg: noArg}, {name: "--restore-skmark", arg: noArg}}}, true
	case "nfacct":
		// Counts in an accounting object; it never decides a match.
		return extSpec{opts: []optSpec{{name: "--nfacct-name", arg: textArg}}}, true
	case "tcp", "udp", "sctp":
		return extSpec{opts: ports, proto: true}, true
	case "addrtype":
		return extSpec{opts: []optSpec{
			{name: "--src-type", arg: addrTypesArg, negatable: true},
			{name: "--dst-type", arg: addrTypesArg, negatable: true},
			{name: "--limit-iface-in"},
			{name: "--limit-iface-out"},
		}}, true
	case "statistic":
		return extSpec{opts: []optSpec{
			{name: "--mode", arg: modeArg},
			{name: "--probability", arg: fractionArg, negatable: true},
			{name: "--every", arg: uintArg, negatable: true},
			{name: "--packet", arg: uintArg},
		}}, true
	case "recent":
		return extSpec{opts: []optSpec{
			{name: "--set", negatable: true},
			{name: "--rcheck", negatable: true},
			{name: "--update", negatable: true},
			{name: "--remove", negatable: true},
			{name: "--seconds", arg: uintArg},
			{name: "--reap"},
			{name: "--hitcount", arg: uintArg},
			{name: "--rttl"},
			{name: "--name", arg: textArg},
			{name: "--mask", arg: maskArg},
			{name: "--rsource"},
			{name: "--rdest"},
		}}, true
	case "mark":
		return extSpec{opts: []optSpec{{name: "--mark", arg: markArg, negatable: true}}}, true
	case "conntrack":
		return extSpec{opts: []optSpec{
			{name: "--ctstate", arg: ctStatesArg, negatable: true},
			{name: "--ctorigsrc", arg: prefixArg, negatable: true},
			{name: "--ctorigdst", arg: prefixArg, negatable: true},
			{name: "--ctorigsrcport", arg: portArg, negatable: true},
			{name: "--ctorigdstport", arg: portArg, negatable: true},
			{name: "--ctdir", arg: ctDirArg},
		}}, true
	case "state":
		return extSpec{opts: []optSpec{{name: "--state", arg: statesArg, negatable: true}}}, true
	case "set":
		// The IPVS mode's sets. Whether the set exists (and is of the
		// rule's family) is the kernel's to say; the fake knows no sets.
		return extSpec{opts: []optSpec{
			{name: "--match-set", arg: setArg, negatable: true},
			{name: "--return-nomatch", negatable: true},
		}}, true
	case "physdev":
		return extSpec{opts: []optSpec{
			{name: "--physdev-in", arg: textArg, negatable: true},
			{name: "--physdev-out", arg: textArg, negatable: true},
			{name: "--physdev-is-in", negatable: true},
			{name: "--physdev-is-out", negatable: true},
			{name: "--physdev-is-bridged", negatable: true},
		}}, true
	case "ipvs":
		// Save text from libxt_ipvs's save function: --vproto as a number,
		// --vaddr with its mask. Not checked against a kernel: the test
		// host has no IPVS, so the real tool refuses to load the match.
		return extSpec{opts: []optSpec{
			{name: "--ipvs", negatable: true},
			{name: "--vproto", arg: protoNumArg, negatable: true},
			{name: "--vaddr", arg: prefixArg, negatable: true},
			{name: "--vport", arg: portNArg, negatable: true},
		}}, true
	}
	return extSpec{}, false
}

// targetSpec describes the target extensions kproxy's modes emit and the
// standard verdicts. Any other target is a user chain.
func targetSpec(name string) (extSpec, bool) {
	nat := []string{"nat"}
	switch name {
	case "ACCEPT", "DROP", "RETURN":
		return extSpec{}, true
	case "REJECT":
		return extSpec{opts: []optSpec{{name: "--reject-with", arg: rejectArg}}, tables: []string{"filter", "mangle", "raw"}}, true
	case "DNAT":
		return extSpec{opts: []optSpec{
			{name: "--to-destination", arg: natAddrArg},
			{name: "--random"},
			{name: "--persistent"},
		}, tables: nat}, true
	case "SNAT":
		return extSpec{opts: []optSpec{
			{name: "--to-source", arg: natAddrArg},
			{name: "--random"},
			{name: "--random-fully"},
			{name: "--persistent"},
		}, tables: nat}, true
	case "MASQUERADE":
		return extSpec{opts: []optSpec{
			{name: "--to-ports", arg: portNArg},
			{name: "--random"},
			{name: "--random-fully"},
		}, tables: nat}, true
	case "REDIRECT":
		return extSpec{opts: []optSpec{
			{name: "--to-ports", arg: portNArg},
			{name: "--random"},
		}, tables: nat}, true
	case "MARK":
		return extSpec{opts: []optSpec{
			{name: "--set-xmark", arg: markArg},
			{name: "--set-mark", arg: markArg},
			{name: "--and-mark", arg: markArg},
			{name: "--or-mark", arg: markArg},
			{name: "--xor-mark", arg: markArg},
		}}, true
	}
	return extSpec{}, false
}

// IsExtensionTarget says whether name is a verdict or a target extension
// Parse knows, rather than a chain.
func IsExtensionTarget(name string) bool {
	_, ok := targetSpec(name)
	return ok
}

// TargetAllowedIn says whether the kernel accepts target in table's chains;
// the real tools only find out when the kernel refuses the rule.
func TargetAllowedIn(target, table string) bool {
	spec, ok := targetSpec(target)
	if !ok || spec.tables == nil {
		return true
	}
	for _, t := range spec.tables {
		if t == table {
			return true
		}
	}
	return false
}
