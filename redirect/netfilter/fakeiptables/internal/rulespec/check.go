package rulespec

import (
	"net/netip"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// checkArg refuses an argument the extension would refuse.
func checkArg(spec optSpec, arg string, fam ipfamily.Family) error {
	var err error
	switch spec.arg {
	case portArg:
		_, _, err = ParsePortRange(arg)
	case markArg:
		_, _, err = ParseMark(arg)
	case fractionArg:
		_, err = ParseProbability(arg)
	case prefixArg:
		_, err = ParsePrefix(arg, fam)
	case natAddrArg:
		_, _, err = ParseNATAddr(arg, fam)
	case portNArg:
		_, err = ParseToPort(arg)
	case uintArg:
		if _, perr := parseUint32(arg); perr != nil {
			err = errorf("bad value for option \"%s\": \"%s\"", spec.name, arg)
		}
	case maskArg:
		a, perr := netip.ParseAddr(arg)
		if perr != nil || !inFamily(a, fam) {
			err = errorf("host/network `%s' not found", arg)
		}
	case ctStatesArg:
		err = checkList(arg, "ctstate", ctStates())
	case ctDirArg:
		if arg != "ORIGINAL" && arg != "REPLY" {
			err = errorf("conntrack: unknown direction \"%s\" for option \"--ctdir\"", arg)
		}
	case statesArg:
		err = checkList(arg, "state", states())
	case addrTypesArg:
		err = checkList(arg, "address type", addrTypes())
	case modeArg:
		err = checkList(arg, "mode", []string{"random", "nth"})
	case rejectArg:
		err = checkList(arg, "reject type", rejectTypes(fam))
	case setArg:
		_, flags, _ := strings.Cut(arg, " ")
		err = checkSetFlags(flags)
	case protoNumArg:
		if _, perr := strconv.ParseUint(arg, 10, 8); perr != nil {
			err = errorf("unknown protocol \"%s\" for option \"%s\": write its number, as iptables-save prints it", arg, spec.name)
		}
	}
	return err
}

// check refuses combinations the extensions refuse once all options are read.
func (p *parser) check() error {
	for _, m := range p.rule.Matches {
		spec, _ := matchSpec(m.Name)
		if spec.proto && (p.rule.Protocol == nil || p.rule.Protocol.Negated || p.rule.Protocol.Name != m.Name) {
			return errorf("%s match requires '-p %s'", strings.ToUpper(m.Name), m.Name)
		}
		if err := checkMatchOptions(m); err != nil {
			return err
		}
	}
	return checkTargetOptions(p.rule.Target)
}

func checkMatchOptions(m Match) error {
	has := func(name string) bool { _, ok := FindOption(m.Options, name); return ok }
	switch m.Name {
	case "comment":
		if !has("--comment") {
			return errorf("comment: option \"--comment\" must be specified")
		}
	case "mark":
		if !has("--mark") {
			return errorf("mark: option \"--mark\" must be specified")
		}
	case "statistic":
		mode, _ := FindOption(m.Options, "--mode")
		switch {
		case mode.Arg == "random" && !has("--probability"):
			return errorf("statistic: --mode random needs --probability")
		case mode.Arg == "nth" && !has("--every"):
			return errorf("statistic: --mode nth needs --every")
		case mode.Arg == "":
			return errorf("statistic: option \"--mode\" must be specified")
		}
	case "set":
		if !has("--match-set") {
			return errorf("You must specify `--match-set' with proper arguments")
		}
	case "physdev", "ipvs":
		if len(m.Options) == 0 {
			return errorf("%s: at least one option is required", strings.ToUpper(m.Name))
		}
	case "recent":
		n := 0
		for _, o := range []string{"--set", "--rcheck", "--update", "--remove"} {
			if has(o) {
				n++
			}
		}
		if n != 1 {
			return errorf("recent: you must specify one of `--set', `--rcheck' `--update' or `--remove'")
		}
	}
	return nil
}

func checkTargetOptions(t Target) error {
	has := func(name string) bool { _, ok := FindOption(t.Options, name); return ok }
	switch t.Name {
	case "DNAT":
		if !has("--to-destination") {
			return errorf("DNAT: option \"--to-destination\" must be specified")
		}
	case "SNAT":
		if !has("--to-source") {
			return errorf("SNAT: option \"--to-source\" must be specified")
		}
	case "MARK":
		if len(t.Options) != 1 {
			return errorf("MARK: exactly one of --set-xmark, --set-mark, --and-mark, --or-mark, --xor-mark is needed")
		}
	}
	return nil
}

// maxSetDimensions is the kernel's IPSET_DIM_MAX: a set match names at most
// six src/dst flags.
const maxSetDimensions = 6

// checkSetFlags checks --match-set's flags: one to six of "src" and "dst",
// comma-separated.
func checkSetFlags(flags string) error {
	items := strings.Split(flags, ",")
	if len(items) > maxSetDimensions {
		return errorf("Can't be more src/dst options than %d.", maxSetDimensions)
	}
	for _, f := range items {
		if f != "src" && f != "dst" {
			return errorf("You must specify (the comma separated list of) 'src' or 'dst'.")
		}
	}
	return nil
}
