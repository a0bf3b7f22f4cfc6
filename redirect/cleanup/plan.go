package cleanup

import (
	"fmt"
	"strings"
)

// TableRestore is the iptables-restore --noflush input that cleans one table.
type TableRestore struct {
	Table string
	Input string
}

type savedRule struct {
	chain string
	line  string // as iptables-save printed it, starting "-A "
}

type savedTable struct {
	name   string
	chains []string // user-defined chains, in save order
	rules  []savedRule
}

// Plan computes, from one backend's iptables-save output for one family, the
// restore inputs that remove what scope says goes. Per table, in one atomic restore: the
// removed chains are flushed (a --noflush declaration empties a chain), rules
// elsewhere that jump to them are deleted, then the chains are deleted. Rules
// in chains the kept mode shares with a removed one also lose their matches
// on ipsets being destroyed, or the destroy would fail with "in use".
// Tables needing no change produce no input, so a clean node is a no-op.
func Plan(save string, scope Scope) ([]TableRestore, error) {
	sc := scope.resolve()
	tables, err := parseSave(save)
	if err != nil {
		return nil, err
	}
	var plans []TableRestore
	for _, t := range tables {
		in, err := planTable(t, sc)
		if err != nil {
			return nil, err
		}
		if in != "" {
			plans = append(plans, TableRestore{Table: t.name, Input: in})
		}
	}
	return plans, nil
}

func planTable(t savedTable, sc resolvedScope) (string, error) {
	removed := map[string]bool{}
	var removedOrder []string
	for _, c := range t.chains {
		if sc.removeChain(t.name, c) {
			removed[c] = true
			removedOrder = append(removedOrder, c)
		}
	}
	var deletes []string
	for _, r := range t.rules {
		if removed[r.chain] {
			continue // emptied wholesale by the flush
		}
		args, err := splitArgs(r.line)
		if err != nil {
			return "", fmt.Errorf("table %s: %w", t.name, err)
		}
		if target := jumpTarget(args); removed[target] ||
			(sc.keptChain(t.name, r.chain) && matchesRemovedSet(args, sc)) {
			deletes = append(deletes, "-D"+strings.TrimPrefix(r.line, "-A"))
		}
	}
	if len(removedOrder) == 0 && len(deletes) == 0 {
		return "", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", t.name)
	for _, c := range removedOrder {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for _, d := range deletes {
		b.WriteString(d + "\n")
	}
	for _, c := range removedOrder {
		fmt.Fprintf(&b, "-X %s\n", c)
	}
	b.WriteString("COMMIT\n")
	return b.String(), nil
}

// jumpTarget returns the chain a rule jumps or goes to ("" if none).
func jumpTarget(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-j", "--jump", "-g", "--goto":
			return args[i+1]
		}
	}
	return ""
}

func matchesRemovedSet(args []string, sc resolvedScope) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--match-set" && sc.removeSet(args[i+1]) {
			return true
		}
	}
	return false
}

// parseSave reads iptables-save output into tables of chains and rules.
func parseSave(save string) ([]savedTable, error) {
	var tables []savedTable
	var cur *savedTable
	for n, raw := range strings.Split(save, "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			if cur != nil {
				return nil, fmt.Errorf("iptables-save line %d: table %q starts before table %q is committed", n+1, line[1:], cur.name)
			}
			tables = append(tables, savedTable{name: line[1:]})
			cur = &tables[len(tables)-1]
		case cur == nil:
			return nil, fmt.Errorf("iptables-save line %d: %q outside any table", n+1, line)
		case line == "COMMIT":
			cur = nil
		case strings.HasPrefix(line, ":"):
			fields := strings.Fields(line[1:])
			if len(fields) < 2 {
				return nil, fmt.Errorf("iptables-save line %d: malformed chain declaration %q", n+1, line)
			}
			if fields[1] == "-" { // built-in chains carry a policy instead
				cur.chains = append(cur.chains, fields[0])
			}
		case strings.HasPrefix(line, "-A "):
			// Only the chain is read here; the rest is split only for rules
			// that survive, as most rules of a removed mode sit in its chains.
			chain, _, _ := strings.Cut(strings.TrimLeft(line[3:], " "), " ")
			if chain == "" {
				return nil, fmt.Errorf("iptables-save line %d: rule without a chain", n+1)
			}
			cur.rules = append(cur.rules, savedRule{chain: chain, line: line})
		default:
			return nil, fmt.Errorf("iptables-save line %d: unexpected %q", n+1, line)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("iptables-save output ends inside table %q (no COMMIT)", cur.name)
	}
	return tables, nil
}

// splitArgs splits a saved rule the way iptables-restore does: on spaces,
// with double quotes grouping and backslash escaping inside them. Unquoted
// words are sliced from line without copying: saves hold tens of thousands
// of rules.
func splitArgs(line string) ([]string, error) {
	args := make([]string, 0, 16)
	for i := 0; i < len(line); {
		if line[i] == ' ' || line[i] == '\t' {
			i++
			continue
		}
		start := i
		for i < len(line) && line[i] != ' ' && line[i] != '\t' && line[i] != '"' {
			i++
		}
		if i == len(line) || line[i] != '"' {
			args = append(args, line[start:i])
			continue
		}
		word, next, err := quotedWord(line, start)
		if err != nil {
			return nil, err
		}
		args = append(args, word)
		i = next
	}
	return args, nil
}

// quotedWord reads the word starting at start that contains double quotes,
// returning it unquoted and the index after it.
func quotedWord(line string, start int) (string, int, error) {
	var b strings.Builder
	inQuote := false
	i := start
	for ; i < len(line); i++ {
		c := line[i]
		if !inQuote && (c == ' ' || c == '\t') {
			break
		}
		switch {
		case inQuote && c == '\\' && i+1 < len(line):
			i++
			b.WriteByte(line[i])
		case c == '"':
			inQuote = !inQuote
		default:
			b.WriteByte(c)
		}
	}
	if inQuote {
		return "", 0, fmt.Errorf("unterminated quote in %q", line)
	}
	return b.String(), i, nil
}
