package rulespec

import (
	"fmt"
	"net/netip"
	"strings"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Error is a rule the real tool's parser would refuse, worded as
// iptables 1.8.9 words it.
type Error struct {
	Msg string
	// Bare: the tool prints the message without its name and version in
	// front ("Bad argument `x'").
	Bare bool
}

func (e *Error) Error() string { return e.Msg }

func errorf(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// Context is where a rule is written.
type Context struct {
	Family ipfamily.Family
	Table  string
}

// Rule is one parsed rule: the words after "-A CHAIN".
type Rule struct {
	Source, Destination       *AddrMatch
	Protocol                  *NameMatch
	InInterface, OutInterface *NameMatch
	// Matches are the -m extensions in the order written.
	Matches []Match
	// Target is the zero value for a rule without -j or -g.
	Target Target
}

// AddrMatch is -s or -d.
type AddrMatch struct {
	Prefix  netip.Prefix
	Negated bool
}

// NameMatch is -p, -i or -o.
type NameMatch struct {
	Name    string
	Negated bool
}

// Match is one -m extension with its options.
type Match struct {
	Name    string
	Options []Option
}

// Option is one --option of a match or target, under its canonical name.
type Option struct {
	Name    string
	Negated bool
	Arg     string // "" for an option without argument
}

// Target is the rule's -j or -g.
type Target struct {
	Name string
	// Goto: -g, which does not come back to this chain.
	Goto    bool
	Options []Option
}

// IsChain says whether the target is a user chain rather than a verdict
// or target extension.
func (t Target) IsChain() bool { return t.Name != "" && !IsExtensionTarget(t.Name) }

// FindOption returns the named option of a match or target.
func FindOption(opts []Option, name string) (Option, bool) {
	for _, o := range opts {
		if o.Name == name {
			return o, true
		}
	}
	return Option{}, false
}

// parser holds the state of one Parse.
type parser struct {
	ctx   Context
	words []string
	i     int
	rule  Rule
}

// Parse parses a rule's words (after "-A CHAIN") for ctx, refusing what
// iptables 1.8.9 would refuse among the options of Matches() and the
// targets kproxy emits, and anything else it does not model.
func Parse(words []string, ctx Context) (*Rule, error) {
	p := &parser{ctx: ctx, words: words}
	for p.i < len(words) {
		if err := p.next(); err != nil {
			return nil, err
		}
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return &p.rule, nil
}

// next consumes one option (with a "!" before it, if any).
func (p *parser) next() error {
	negated := false
	if p.words[p.i] == "!" {
		negated = true
		p.i++
		if p.i == len(p.words) {
			return &Error{Msg: "Bad argument `!'", Bare: true}
		}
	}
	w := p.words[p.i]
	p.i++
	switch w {
	case "-s", "--source", "-d", "--destination":
		return p.address(w, negated)
	case "-p", "--protocol", "-i", "--in-interface", "-o", "--out-interface":
		return p.name(w, negated)
	case "-m", "--match":
		if negated {
			return errorf("unexpected ! before -m")
		}
		return p.match()
	case "-j", "--jump", "-g", "--goto":
		if negated {
			return errorf("cannot have ! before -%c", w[len(w)-1])
		}
		return p.target(w == "-g" || w == "--goto")
	}
	if strings.HasPrefix(w, "--") {
		return p.option(w, negated)
	}
	return &Error{Msg: fmt.Sprintf("Bad argument `%s'", w), Bare: true}
}

func (p *parser) arg(opt string) (string, error) {
	if p.i == len(p.words) {
		return "", errorf("option \"%s\" requires an argument", opt)
	}
	p.i++
	return p.words[p.i-1], nil
}

func (p *parser) address(opt string, negated bool) error {
	arg, err := p.arg(opt)
	if err != nil {
		return err
	}
	prefix, err := ParsePrefix(arg, p.ctx.Family)
	if err != nil {
		return err
	}
	dst := &p.rule.Source
	if opt == "-d" || opt == "--destination" {
		dst = &p.rule.Destination
	}
	if *dst != nil {
		return errorf("multiple %s flags not allowed", opt)
	}
	*dst = &AddrMatch{Prefix: prefix, Negated: negated}
	return nil
}

func (p *parser) name(opt string, negated bool) error {
	arg, err := p.arg(opt)
	if err != nil {
		return err
	}
	var dst **NameMatch
	switch opt {
	case "-p", "--protocol":
		dst, arg = &p.rule.Protocol, strings.ToLower(arg)
	case "-i", "--in-interface":
		dst = &p.rule.InInterface
	default:
		dst = &p.rule.OutInterface
	}
	if *dst != nil {
		return errorf("multiple %s flags not allowed", opt)
	}
	*dst = &NameMatch{Name: arg, Negated: negated}
	return nil
}

func (p *parser) match() error {
	name, err := p.arg("-m")
	if err != nil {
		return err
	}
	if _, ok := matchSpec(name); !ok {
		return errorf("Couldn't load match `%s':No such file or directory (fakeiptables models %s)",
			name, strings.Join(Matches(), ", "))
	}
	if p.rule.Target.Name != "" {
		return &Error{Msg: fmt.Sprintf("Bad argument `%s'", name), Bare: true}
	}
	p.rule.Matches = append(p.rule.Matches, Match{Name: name})
	return nil
}

func (p *parser) target(isGoto bool) error {
	name, err := p.arg("-j")
	if err != nil {
		return err
	}
	if p.rule.Target.Name != "" {
		return errorf("multiple -j flags not allowed")
	}
	if isGoto && IsExtensionTarget(name) {
		return errorf("goto '%s' is not a chain", name)
	}
	if name == "DROP" && p.ctx.Table == "nat" {
		return errorf("\nThe \"nat\" table is not intended for filtering, the use of DROP is therefore inhibited.\n")
	}
	p.rule.Target = Target{Name: name, Goto: isGoto}
	return nil
}

// option consumes an --option of the target (after -j) or of the latest
// match that has it.
func (p *parser) option(opt string, negated bool) error {
	var (
		spec optSpec
		ok   bool
		into *[]Option
	)
	if t := &p.rule.Target; t.Name != "" {
		if ts, isExt := targetSpec(t.Name); isExt {
			spec, ok = ts.option(opt)
		}
		into = &t.Options
	} else {
		for i := len(p.rule.Matches) - 1; i >= 0 && !ok; i-- {
			ms, _ := matchSpec(p.rule.Matches[i].Name)
			if spec, ok = ms.option(opt); ok {
				into = &p.rule.Matches[i].Options
			}
		}
	}
	if !ok {
		if proto := p.rule.Protocol; proto != nil && (opt == "--dport" || opt == "--sport") {
			// The real tool loads the protocol's match silently, and its
			// save then prints "-m <proto>": kproxy writes that form.
			return errorf("unknown option \"%s\": write \"-m %s %s\" as iptables-save prints it", opt, proto.Name, opt)
		}
		return errorf("unknown option \"%s\"", opt)
	}
	if negated && !spec.negatable {
		return errorf("option \"%s\" cannot be inverted", opt)
	}
	o := Option{Name: spec.name, Negated: negated}
	if spec.arg != noArg {
		arg, err := p.arg(opt)
		if err != nil {
			return err
		}
		if spec.arg == setArg {
			// --match-set takes the set's name and its flags.
			flags, err := p.arg(opt)
			if err != nil {
				return err
			}
			arg += " " + flags
		}
		if err := checkArg(spec, arg, p.ctx.Family); err != nil {
			return err
		}
		o.Arg = arg
	}
	*into = append(*into, o)
	return nil
}
