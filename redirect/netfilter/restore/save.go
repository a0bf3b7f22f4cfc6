package restore

import (
	"fmt"
	"iter"
	"strings"
)

// SavedTable is one table of an iptables-save dump.
type SavedTable struct {
	Name   string
	Chains []SavedChain // in dump order: built-in chains first, as both backends print them
	Rules  []SavedRule  // in dump order
}

// SavedChain is a chain declaration ":NAME POLICY [packets:bytes]".
type SavedChain struct {
	Name string
	// Policy is ACCEPT or DROP for a built-in chain, "-" for a user chain.
	Policy string
}

// Builtin says whether the chain is one of the table's built-in chains,
// which carry a policy instead of "-".
func (c SavedChain) Builtin() bool { return c.Policy != "-" }

// SavedRule is one "-A CHAIN ..." line.
type SavedRule struct {
	Chain string
	// Line is the rule as printed, starting "-A " (without the counters
	// iptables-save -c prints in front).
	Line string
	spec int // where the text after "-A CHAIN " starts in Line
}

// Spec is the rule after "-A CHAIN ", as iptables-restore takes it after
// "-A CHAIN", "-I CHAIN 1" or "-D CHAIN".
func (r SavedRule) Spec() string { return r.Line[r.spec:] }

// Words splits the rule after "-A CHAIN" into words (see SplitRule).
func (r SavedRule) Words() ([]string, error) {
	return SplitRule(r.Spec())
}

// ParseChainLine reads a chain declaration ":NAME POLICY [packets:bytes]"
// (the counters may be missing) of a save or a restore payload.
func ParseChainLine(line string) (SavedChain, bool) {
	if !strings.HasPrefix(line, ":") {
		return SavedChain{}, false
	}
	fields := strings.Fields(line[1:])
	if len(fields) < 2 {
		return SavedChain{}, false
	}
	return SavedChain{Name: fields[0], Policy: fields[1]}, true
}

// LineKind is what a line of an iptables-save dump or an iptables-restore
// payload is; both formats share the layout.
type LineKind int

const (
	BlankLine   LineKind = iota // empty, or a "#" comment
	TableLine                   // "*NAME" opens a table
	CommitLine                  // "COMMIT" closes it
	ChainLine                   // ":NAME POLICY [packets:bytes]"
	CommandLine                 // anything else: a rule ("-A ...") or command
)

// Line is one line, without surrounding white space, and its 1-based
// number.
type Line struct {
	N    int
	Kind LineKind
	Text string
}

// Lines yields the lines of a save or restore text in order; a final
// newline ends the last line rather than starting an empty one.
func Lines(text string) iter.Seq[Line] {
	return func(yield func(Line) bool) {
		n := 0
		for raw := range strings.SplitSeq(strings.TrimSuffix(text, "\n"), "\n") {
			n++
			l := Line{N: n, Text: strings.TrimSpace(raw)}
			switch {
			case l.Text == "" || strings.HasPrefix(l.Text, "#"):
				l.Kind = BlankLine
			case strings.HasPrefix(l.Text, "*"):
				l.Kind = TableLine
			case l.Text == "COMMIT":
				l.Kind = CommitLine
			case strings.HasPrefix(l.Text, ":"):
				l.Kind = ChainLine
			default:
				l.Kind = CommandLine
			}
			if !yield(l) {
				return
			}
		}
	}
}

// ParseSave reads iptables-save output into its tables. Comment lines and
// blank lines are skipped; a line that is not iptables-save's, a table
// opened inside another or one without COMMIT is an error naming the line.
// Rules are not split into words (only their chain is read): most callers
// look at a few of the rules only.
func ParseSave(save string) ([]SavedTable, error) {
	var tables []SavedTable
	var cur *SavedTable
	for l := range Lines(save) {
		switch {
		case l.Kind == BlankLine:
		case l.Kind == TableLine:
			if cur != nil {
				return nil, fmt.Errorf("iptables-save line %d: table %q starts before table %q is committed", l.N, l.Text[1:], cur.Name)
			}
			tables = append(tables, SavedTable{Name: l.Text[1:]})
			cur = &tables[len(tables)-1]
		case cur == nil:
			return nil, fmt.Errorf("iptables-save line %d: %q outside any table", l.N, l.Text)
		case l.Kind == CommitLine:
			cur = nil
		case l.Kind == ChainLine:
			c, ok := ParseChainLine(l.Text)
			if !ok {
				return nil, fmt.Errorf("iptables-save line %d: malformed chain declaration %q", l.N, l.Text)
			}
			cur.Chains = append(cur.Chains, c)
		default:
			r, ok := parseRuleLine(l.Text)
			if !ok {
				return nil, fmt.Errorf("iptables-save line %d: unexpected %q", l.N, l.Text)
			}
			cur.Rules = append(cur.Rules, r)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("iptables-save output ends inside table %q (no COMMIT)", cur.Name)
	}
	return tables, nil
}

// parseRuleLine reads "-A CHAIN ...", after "[packets:bytes] " counters if
// any.
func parseRuleLine(line string) (SavedRule, bool) {
	if strings.HasPrefix(line, "[") {
		_, rest, ok := strings.Cut(line, "] ")
		if !ok {
			return SavedRule{}, false
		}
		line = rest
	}
	if !strings.HasPrefix(line, "-A ") {
		return SavedRule{}, false
	}
	chain, spec, _ := strings.Cut(strings.TrimLeft(line[3:], " "), " ")
	if chain == "" {
		return SavedRule{}, false
	}
	return SavedRule{Chain: chain, Line: line, spec: len(line) - len(spec)}, true
}

// NewSavedRule is the rule spec in chain as iptables-save prints it.
func NewSavedRule(chain, spec string) SavedRule {
	if spec == "" {
		return SavedRule{Chain: chain, Line: "-A " + chain, spec: len("-A ") + len(chain)}
	}
	return SavedRule{Chain: chain, Line: "-A " + chain + " " + spec, spec: len("-A ") + len(chain) + 1}
}

// FormatSave prints tables as iptables-save does, without its timestamp
// comments and with zero counters: per table "*NAME", its chain
// declarations, its rules and COMMIT. ParseSave reads it back.
func FormatSave(tables ...SavedTable) string {
	var b strings.Builder
	for _, t := range tables {
		b.WriteString("*" + t.Name + "\n")
		for _, c := range t.Chains {
			b.WriteString(":" + c.Name + " " + c.Policy + " [0:0]\n")
		}
		for _, r := range t.Rules {
			b.WriteString(r.Line + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}
