package trace

import (
	"fmt"
	"slices"
	"strings"

	"kproxy.dev/kproxy/redirect/fakeiptables/internal/rulespec"
	"kproxy.dev/kproxy/redirect/kernel"
)

// Rules is a parsed dump, ready to trace packets of its family through.
type Rules struct {
	fam    kernel.Family
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
func Load(dump string, fam kernel.Family) (*Rules, error) {
	rs := &Rules{fam: fam, tables: map[string]*table{}}
	var cur *table
	for i, raw := range strings.Split(dump, "\n") {
		line := strings.TrimSpace(raw)
		if err := rs.line(&cur, line); err != nil {
			return nil, fmt.Errorf("dump line %d %q: %w", i+1, line, err)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("dump: table %s has no COMMIT", cur.name)
	}
	for _, t := range rs.tables {
		if err := t.check(); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

func (rs *Rules) line(cur **table, line string) error {
	switch {
	case line == "" || strings.HasPrefix(line, "#"):
		return nil
	case strings.HasPrefix(line, "*"):
		if *cur != nil {
			return fmt.Errorf("table %s opened before table %s's COMMIT", line[1:], (*cur).name)
		}
		name := line[1:]
		if _, dup := rs.tables[name]; dup {
			return fmt.Errorf("table %s dumped twice", name)
		}
		*cur = &table{name: name, chains: map[string]*chain{}}
		rs.tables[name] = *cur
		return nil
	case *cur == nil:
		return fmt.Errorf("outside a table")
	case line == "COMMIT":
		*cur = nil
		return nil
	case strings.HasPrefix(line, ":"):
		return (*cur).declare(line)
	case strings.HasPrefix(line, "-A "), strings.HasPrefix(line, "["):
		return (*cur).appendRule(line, rs.fam)
	}
	return fmt.Errorf("not an iptables-save line")
}

func (t *table) declare(line string) error {
	fields := strings.Fields(line[1:])
	if len(fields) < 2 {
		return fmt.Errorf("malformed chain declaration")
	}
	name, policy := fields[0], fields[1]
	if _, dup := t.chains[name]; dup {
		return fmt.Errorf("chain %s declared twice", name)
	}
	builtin := policy != "-"
	if builtin && policy != "ACCEPT" && policy != "DROP" {
		return fmt.Errorf("chain %s has policy %s; only ACCEPT and DROP exist", name, policy)
	}
	t.chains[name] = &chain{name: name, builtin: builtin, policy: policy}
	return nil
}

func (t *table) appendRule(line string, fam kernel.Family) error {
	if strings.HasPrefix(line, "[") {
		// "[packets:bytes] -A ..." from iptables-save -c.
		_, rest, ok := strings.Cut(line, "] ")
		if !ok {
			return fmt.Errorf("malformed counters")
		}
		line = rest
	}
	words, err := rulespec.Split(line)
	if err != nil {
		return err
	}
	if len(words) < 2 || words[0] != "-A" {
		return fmt.Errorf("not an -A rule")
	}
	c, ok := t.chains[words[1]]
	if !ok {
		return fmt.Errorf("rule in chain %s, which table %s does not declare", words[1], t.name)
	}
	if !slices.Contains(tracedTables(), t.name) {
		return fmt.Errorf("table %s has rules; the tracer follows only the nat and filter tables", t.name)
	}
	parsed, err := rulespec.Parse(words[2:], rulespec.Context{Family: fam, Table: t.name})
	if err != nil {
		return err
	}
	c.rules = append(c.rules, &rule{text: t.name + ": " + line, parsed: parsed})
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
