package trace

import (
	"fmt"
	"slices"
	"strings"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/internal/rulespec"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Rules is a parsed dump, ready to trace packets of its family through.
type Rules struct {
	fam    ipfamily.Family
	tables map[string]*table
}

type table struct {
	name   string
	chains map[string]*chain
}

type chain struct {
	name    string
	builtin bool
	policy  string
	rules   []*rule
}

type rule struct {
	// text is the dump's line, for Path.Rules.
	text   string
	parsed *rulespec.Rule
}

// tracedTables are the tables the tracer walks; other tables may appear
// in a dump only without rules.
func tracedTables() []string { return []string{"nat", "filter"} }

// Load parses an iptables-save dump of family fam. It fails on anything the
// tracer cannot follow: a line that is not iptables-save's, a rule it
// cannot parse, a jump to a chain the table does not declare, a loop of
// jumps, rules in a table other than nat and filter.
func Load(dump string, fam ipfamily.Family) (*Rules, error) {
	saved, err := restore.ParseSave(dump)
	if err != nil {
		return nil, fmt.Errorf("dump: %w", err)
	}
	rs := &Rules{fam: fam, tables: map[string]*table{}}
	for _, st := range saved {
		if _, dup := rs.tables[st.Name]; dup {
			return nil, fmt.Errorf("dump: table %s dumped twice", st.Name)
		}
		t := &table{name: st.Name, chains: map[string]*chain{}}
		rs.tables[st.Name] = t
		for _, c := range st.Chains {
			if err := t.declare(c); err != nil {
				return nil, fmt.Errorf("dump: table %s: %w", st.Name, err)
			}
		}
		for _, r := range st.Rules {
			if err := t.appendRule(r, fam); err != nil {
				return nil, fmt.Errorf("dump rule %q: %w", r.Line, err)
			}
		}
	}
	for _, t := range rs.tables {
		if err := t.check(); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

func (t *table) declare(c restore.SavedChain) error {
	if _, dup := t.chains[c.Name]; dup {
		return fmt.Errorf("chain %s declared twice", c.Name)
	}
	if c.Builtin() && c.Policy != "ACCEPT" && c.Policy != "DROP" {
		return fmt.Errorf("chain %s has policy %s; only ACCEPT and DROP exist", c.Name, c.Policy)
	}
	t.chains[c.Name] = &chain{name: c.Name, builtin: c.Builtin(), policy: c.Policy}
	return nil
}

func (t *table) appendRule(r restore.SavedRule, fam ipfamily.Family) error {
	c, ok := t.chains[r.Chain]
	if !ok {
		return fmt.Errorf("rule in chain %s, which table %s does not declare", r.Chain, t.name)
	}
	if !slices.Contains(tracedTables(), t.name) {
		return fmt.Errorf("table %s has rules; the tracer follows only the nat and filter tables", t.name)
	}
	words, err := r.Words()
	if err != nil {
		return err
	}
	parsed, err := rulespec.Parse(words, rulespec.Context{Family: fam, Table: t.name})
	if err != nil {
		return err
	}
	c.rules = append(c.rules, &rule{text: t.name + ": " + r.Line, parsed: parsed})
	return nil
}

// check refuses jumps to undeclared chains and loops of jumps.
func (t *table) check() error {
	for _, c := range t.chains {
		for _, r := range c.rules {
			if target := r.parsed.Target; target.IsChain() {
				if _, ok := t.chains[target.Name]; !ok {
					return fmt.Errorf("%s: unknown target or undeclared chain %q", r.text, target.Name)
				}
			}
		}
	}
	// Depth-first search; a chain met again while on the stack closes a loop.
	const (
		onStack = iota + 1 // 0: not visited yet
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(name string) error
	visit = func(name string) error {
		switch state[name] {
		case onStack:
			i := slices.Index(stack, name)
			return fmt.Errorf("table %s: rule loop %s", t.name, strings.Join(append(slices.Clone(stack[i:]), name), " -> "))
		case done:
			return nil
		}
		state[name] = onStack
		stack = append(stack, name)
		for _, r := range t.chains[name].rules {
			if r.parsed.Target.IsChain() {
				if err := visit(r.parsed.Target.Name); err != nil {
					return err
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[name] = done
		return nil
	}
	names := make([]string, 0, len(t.chains))
	for n := range t.chains {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := visit(n); err != nil {
			return err
		}
	}
	return nil
}
