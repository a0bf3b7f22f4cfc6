package fakeiptables

import (
	"fmt"
	"slices"
	"strconv"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/internal/rulespec"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// Single rule commands, as an operator or another tool on the node runs
// them. Each is one iptables command, applied at once and atomically;
// failures read like go-iptables' errors.

// Exists is iptables -C. Like go-iptables it answers false, not an error,
// when the chain does not exist.
func (f *Fake) Exists(tableName, chainName string, spec ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkTable(tableName); err != nil {
		return false, err
	}
	if _, err := parseRule(f, tableName, spec); err != nil {
		return false, commandError(tableName, "-C", chainName, spec, 2, err.Error())
	}
	c, ok := f.table(tableName).chains[chainName]
	if !ok {
		return false, nil
	}
	text := restore.JoinRule(spec)
	return slices.ContainsFunc(c.rules, func(r rule) bool { return r.text == text }), nil
}

// Insert is iptables -I chain pos.
func (f *Fake) Insert(tableName, chainName string, pos int, spec ...string) error {
	return f.edit(tableName, "-I", chainName, append([]string{strconv.Itoa(pos)}, spec...))
}

// Append is iptables -A.
func (f *Fake) Append(tableName, chainName string, spec ...string) error {
	return f.edit(tableName, "-A", chainName, spec)
}

// Delete removes one rule (iptables -D), as an operator cleaning up by
// hand would.
func (f *Fake) Delete(tableName, chainName string, spec ...string) error {
	return f.edit(tableName, "-D", chainName, spec)
}

func (f *Fake) edit(tableName, op, chainName string, args []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkTable(tableName); err != nil {
		return err
	}
	x := newTxn(f.fam, f.table(tableName).fork())
	if se := x.command(append([]string{op, chainName}, args...), 1); se != nil {
		return commandError(tableName, op, chainName, args, 2, se.Msg)
	}
	if code, msg := x.verdict(); code != 0 {
		return commandError(tableName, op, chainName, args, code, msg)
	}
	f.tables[tableName] = x.work
	return nil
}

func (f *Fake) checkTable(name string) error {
	if builtinChains(name) == nil {
		return fmt.Errorf("fakeiptables: iptables -t %s: exit status 3: can't initialize iptables table `%s': Table does not exist", name, name)
	}
	return nil
}

func parseRule(f *Fake, tableName string, words []string) (*rulespec.Rule, error) {
	return rulespec.Parse(words, rulespec.Context{Family: f.fam, Table: tableName})
}

func commandError(tableName, op, chainName string, args []string, code int, msg string) error {
	return fmt.Errorf("fakeiptables: iptables -t %s %s %s %s: exit status %d: %s",
		tableName, op, chainName, restore.JoinRule(args), code, msg)
}
