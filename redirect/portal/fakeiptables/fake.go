// Package fakeiptables is an in-memory iptables for one IP family that
// parses what the portal Applier sends it and fails the way the real tools
// do: iptables-restore input is applied table by table, atomically, and
// rejected with "Error occurred at line: N" for a jump to a missing chain, a
// deleted chain that is still referenced, an unknown table, a target used
// in a table that cannot load it, or a missing COMMIT. It implements
// kernel.Runner (for *-restore and *-save) and the go-iptables subset
// portal.JumpRules.
package fakeiptables

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"kproxy.dev/kproxy/redirect/kernel"
)

// builtinChains are the chains each known table starts with.
func builtinChains() map[string][]string {
	return map[string][]string{
		"filter": {"INPUT", "FORWARD", "OUTPUT"},
		"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
		"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
		"raw":    {"PREROUTING", "OUTPUT"},
	}
}

// targetTables says which tables can load a target; targets not listed load
// anywhere.
func targetTables() map[string][]string {
	return map[string][]string{
		"DNAT":       {"nat"},
		"SNAT":       {"nat"},
		"REDIRECT":   {"nat"},
		"MASQUERADE": {"nat"},
		"REJECT":     {"filter"},
	}
}

func isStandardTarget(t string) bool {
	switch t {
	case "ACCEPT", "DROP", "RETURN", "REJECT", "DNAT", "SNAT", "REDIRECT", "MASQUERADE", "MARK", "LOG", "CONNMARK", "NOTRACK", "CT":
		return true
	}
	return false
}

type chain struct {
	builtin bool
	rules   []string // normalised rule text after "-A CHAIN "
}

type table map[string]*chain

func (t table) clone() table {
	c := make(table, len(t))
	for name, ch := range t {
		c[name] = &chain{builtin: ch.builtin, rules: slices.Clone(ch.rules)}
	}
	return c
}

// Fake is one family's iptables. The zero value is not usable; use New.
type Fake struct {
	mu     sync.Mutex
	tables map[string]table
	// restores records every restore input received, successful or not.
	restores [][]byte
	// failNext, when set, makes the next restore fail with this stderr.
	failNext string
}

// New returns a Fake holding the built-in chains of the filter, nat, mangle
// and raw tables, all empty.
func New() *Fake {
	f := &Fake{tables: map[string]table{}}
	for name, chains := range builtinChains() {
		t := table{}
		for _, c := range chains {
			t[c] = &chain{builtin: true}
		}
		f.tables[name] = t
	}
	return f
}

// Restores returns the restore inputs received so far.
func (f *Fake) Restores() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.restores)
}

// FailNextRestore makes the next restore fail with stderr, as a kernel
// refusing a batch for reasons the fake does not model would.
func (f *Fake) FailNextRestore(stderr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = stderr
}

// Run implements kernel.Runner for "<iptables>-restore" (--noflush only) and
// "<iptables>-save [-t table]".
func (f *Fake) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := strings.Join(append([]string{name}, args...), " ")
	switch {
	case strings.HasSuffix(name, "-restore"):
		if !slices.Contains(args, "--noflush") {
			return nil, cmdErr(cmd, 2, name+": the fake only models --noflush restores\n")
		}
		if msg, code := f.restore(name, stdin); msg != "" {
			return nil, cmdErr(cmd, code, msg)
		}
		return nil, nil
	case strings.HasSuffix(name, "-save"):
		only := ""
		if i := slices.Index(args, "-t"); i >= 0 && i+1 < len(args) {
			only = args[i+1]
		}
		return []byte(f.Save(only)), nil
	}
	return nil, cmdErr(cmd, -1, "fakeiptables: unknown command "+name)
}

func cmdErr(cmd string, code int, stderr string) error {
	return &kernel.CommandError{Command: cmd, ExitCode: code, Stderr: stderr, Err: fmt.Errorf("exit status %d", code)}
}

// restore applies one input; it returns the stderr and exit code of a failure.
func (f *Fake) restore(prog string, input []byte) (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores = append(f.restores, slices.Clone(input))
	if f.failNext != "" {
		msg := f.failNext
		f.failNext = ""
		return msg, 1
	}
	fail := func(line int, format string, a ...any) (string, int) {
		return fmt.Sprintf("%s: %s\nError occurred at line: %d\nTry `%s -h' or '%s --help' for more information.\n",
			prog, fmt.Sprintf(format, a...), line, prog, prog), 2
	}
	lines := strings.Split(strings.TrimSuffix(string(input), "\n"), "\n")
	var (
		name string
		work table
	)
	for i, raw := range lines {
		n := i + 1
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			if work != nil {
				return fail(n, "table %q opened before COMMIT of %q", line[1:], name)
			}
			name = line[1:]
			t, ok := f.tables[name]
			if !ok {
				return fail(n, "unable to initialize table '%s'", name)
			}
			work = t.clone()
		case line == "COMMIT":
			if work == nil {
				return fail(n, "COMMIT outside a table")
			}
			f.tables[name] = work
			work = nil
		case work == nil:
			return fail(n, "rule outside a table")
		case strings.HasPrefix(line, ":"):
			if err := declare(work, line); err != "" {
				return fail(n, "%s", err)
			}
		default:
			if err := command(work, name, line); err != "" {
				return fail(n, "%s", err)
			}
		}
	}
	if work != nil {
		return fmt.Sprintf("%s: COMMIT expected at line %d\n", prog, len(lines)+1), 1
	}
	return "", 0
}

// declare handles ":CHAIN POLICY [p:b]": a new user chain is created, an
// existing one flushed (--noflush semantics: only declared chains are).
func declare(t table, line string) string {
	fields := strings.Fields(line[1:])
	if len(fields) < 2 {
		return "malformed chain declaration " + strconv.Quote(line)
	}
	name := fields[0]
	if c, ok := t[name]; ok {
		if !c.builtin {
			c.rules = nil
		}
		return ""
	}
	if fields[1] != "-" {
		return fmt.Sprintf("chain %s is not built in, it cannot have policy %s", name, fields[1])
	}
	t[name] = &chain{}
	return ""
}

// command handles -A, -I, -D, -F, -X, -N.
func command(t table, tableName, line string) string {
	args, err := split(line)
	if err != nil {
		return err.Error()
	}
	if len(args) < 2 {
		return "bad argument " + strconv.Quote(line)
	}
	op, name, rest := args[0], args[1], args[2:]
	c, exists := t[name]
	switch op {
	case "-N":
		if exists {
			return "Chain already exists"
		}
		t[name] = &chain{}
		return ""
	case "-X":
		if !exists {
			return fmt.Sprintf("Couldn't find chain `%s'", name)
		}
		if c.builtin {
			return "Can't delete built-in chain " + name
		}
		if ref := referrer(t, name); ref != "" {
			return fmt.Sprintf("Chain '%s' is still referenced by a rule in %s (Directory not empty)", name, ref)
		}
		if len(c.rules) > 0 {
			return fmt.Sprintf("Chain '%s' is not empty (Directory not empty)", name)
		}
		delete(t, name)
		return ""
	}
	if !exists {
		return fmt.Sprintf("Chain '%s' does not exist", name)
	}
	switch op {
	case "-F":
		c.rules = nil
		return ""
	case "-A", "-I", "-D":
	default:
		return "unknown command " + op
	}
	pos := 0
	if op == "-I" && len(rest) > 0 {
		if p, err := strconv.Atoi(rest[0]); err == nil {
			pos, rest = p-1, rest[1:]
		}
	}
	if msg := checkTarget(t, tableName, rest); msg != "" {
		return msg
	}
	rule := join(rest)
	switch op {
	case "-A":
		c.rules = append(c.rules, rule)
	case "-I":
		if pos < 0 || pos > len(c.rules) {
			return "Index of insertion too big"
		}
		c.rules = slices.Insert(c.rules, pos, rule)
	case "-D":
		i := slices.Index(c.rules, rule)
		if i < 0 {
			return "Bad rule (does a matching rule exist in that chain?)"
		}
		c.rules = slices.Delete(c.rules, i, i+1)
	}
	return ""
}

// checkTarget rejects jumps to missing chains and targets the table cannot load.
func checkTarget(t table, tableName string, rule []string) string {
	target := targetOf(rule)
	if target == "" {
		return ""
	}
	if isStandardTarget(target) {
		if tables, ok := targetTables()[target]; ok && !slices.Contains(tables, tableName) {
			return fmt.Sprintf("target %s is not valid in table %s", target, tableName)
		}
		return ""
	}
	if _, ok := t[target]; !ok {
		return fmt.Sprintf("Couldn't load target `%s':No such file or directory", target)
	}
	return ""
}

func targetOf(rule []string) string {
	for i := 0; i+1 < len(rule); i++ {
		if rule[i] == "-j" || rule[i] == "--jump" || rule[i] == "-g" || rule[i] == "--goto" {
			return rule[i+1]
		}
	}
	return ""
}

// referrer names a chain holding a rule that jumps to name ("" if none).
func referrer(t table, name string) string {
	for cname, c := range t {
		for _, r := range c.rules {
			args, _ := split("-A X " + r)
			if targetOf(args) == name {
				return cname
			}
		}
	}
	return ""
}

// Save renders the tables (only the named one when table is not "") in
// iptables-save's layout, chains sorted, built-in chains first.
func (f *Fake) Save(only string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for n := range f.tables {
		if only == "" || n == only {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		t := f.tables[n]
		fmt.Fprintf(&b, "*%s\n", n)
		order := chainOrder(n, t)
		for _, c := range order {
			if t[c].builtin {
				fmt.Fprintf(&b, ":%s ACCEPT [0:0]\n", c)
			} else {
				fmt.Fprintf(&b, ":%s - [0:0]\n", c)
			}
		}
		for _, c := range order {
			for _, r := range t[c].rules {
				fmt.Fprintf(&b, "-A %s %s\n", c, r)
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

func chainOrder(name string, t table) []string {
	order := slices.Clone(builtinChains()[name])
	var user []string
	for c, ch := range t {
		if !ch.builtin {
			user = append(user, c)
		}
	}
	slices.Sort(user)
	return append(order, user...)
}

// Rules returns one chain's rules as "-A CHAIN ..." lines (nil if the chain
// does not exist).
func (f *Fake) Rules(tableName, chainName string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.tables[tableName][chainName]
	if !ok {
		return nil
	}
	out := make([]string, len(c.rules))
	for i, r := range c.rules {
		out[i] = "-A " + chainName + " " + r
	}
	return out
}

// HasChain says whether a chain exists.
func (f *Fake) HasChain(tableName, chainName string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.tables[tableName][chainName]
	return ok
}

// Exists implements portal.JumpRules (iptables -C).
func (f *Fake) Exists(tableName, chainName string, rulespec ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.tables[tableName][chainName]
	if !ok {
		return false, fmt.Errorf("iptables: chain %s does not exist in table %s", chainName, tableName)
	}
	return slices.Contains(c.rules, join(rulespec)), nil
}

// Insert implements portal.JumpRules (iptables -I chain pos).
func (f *Fake) Insert(tableName, chainName string, pos int, rulespec ...string) error {
	return f.edit(tableName, append([]string{"-I", chainName, strconv.Itoa(pos)}, rulespec...))
}

// Append implements portal.JumpRules (iptables -A).
func (f *Fake) Append(tableName, chainName string, rulespec ...string) error {
	return f.edit(tableName, append([]string{"-A", chainName}, rulespec...))
}

// Delete removes one rule (iptables -D), as an operator flushing by hand would.
func (f *Fake) Delete(tableName, chainName string, rulespec ...string) error {
	return f.edit(tableName, append([]string{"-D", chainName}, rulespec...))
}

func (f *Fake) edit(tableName string, args []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tables[tableName]
	if !ok {
		return fmt.Errorf("iptables: can't initialize table '%s'", tableName)
	}
	if msg := command(t, tableName, join(args)); msg != "" {
		return fmt.Errorf("iptables %s: %s", strings.Join(args, " "), msg)
	}
	return nil
}

// split tokenises a rule the way iptables-restore does: whitespace
// separated, with double-quoted strings (backslash escapes) as one token.
func split(line string) ([]string, error) {
	var (
		out []string
		cur strings.Builder
		in  bool
		has bool
	)
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case in && ch == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case ch == '"':
			in, has = !in, true
		case !in && (ch == ' ' || ch == '\t'):
			if has {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteByte(ch)
			has = true
		}
	}
	if in {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if has {
		out = append(out, cur.String())
	}
	return out, nil
}

// join renders tokens back into a line, quoting tokens with spaces, so
// equal rules compare equal however they were quoted.
func join(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"") || (i > 0 && args[i-1] == "--comment") {
			out[i] = strconv.Quote(a)
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}
