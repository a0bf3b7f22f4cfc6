package fakeiptables

import (
	"maps"
	"slices"
)

// builtinChains are the chains each known table starts with, in the order
// iptables-save prints them.
func builtinChains(table string) []string {
	switch table {
	case "filter":
		return []string{"INPUT", "FORWARD", "OUTPUT"}
	case "nat":
		return []string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}
	case "mangle":
		return []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
	case "raw":
		return []string{"PREROUTING", "OUTPUT"}
	}
	return nil
}

// rule is one stored rule.
type rule struct {
	// text is the rule after "-A CHAIN ", as the fake prints it (see
	// restore.JoinRule for the one normalisation applied).
	text string
	// jumpsTo is the user chain the rule jumps or goes to, "" if none.
	jumpsTo string
}

type chain struct {
	builtin bool
	policy  string // ACCEPT or DROP for a built-in chain, "-" for a user chain
	rules   []rule
}

// table is one table's chains and, per chain, how many rules jump to it.
// Tables are copied on write: a restore works on a copy whose chain
// pointers are shared with the committed table until written (owned).
type table struct {
	name   string
	chains map[string]*chain
	refs   map[string]int
	owned  map[string]bool
}

func newTable(name string) *table {
	t := &table{name: name, chains: map[string]*chain{}, refs: map[string]int{}, owned: map[string]bool{}}
	for _, c := range builtinChains(name) {
		t.chains[c] = &chain{builtin: true, policy: "ACCEPT"}
		t.owned[c] = true
	}
	return t
}

// fork returns a copy to work on, sharing chains until they are written.
func (t *table) fork() *table {
	return &table{name: t.name, chains: maps.Clone(t.chains), refs: maps.Clone(t.refs), owned: map[string]bool{}}
}

// writable returns chain name, copied first if it is still shared.
func (t *table) writable(name string) *chain {
	c := t.chains[name]
	if c != nil && !t.owned[name] {
		c = &chain{builtin: c.builtin, policy: c.policy, rules: slices.Clone(c.rules)}
		t.chains[name] = c
		t.owned[name] = true
	}
	return c
}

func (t *table) createChain(name string) {
	t.chains[name] = &chain{policy: "-"}
	t.owned[name] = true
}

func (t *table) deleteChain(name string) {
	t.flush(name)
	delete(t.chains, name)
	delete(t.owned, name)
}

func (t *table) flush(name string) {
	c := t.writable(name)
	for _, r := range c.rules {
		t.unref(r)
	}
	c.rules = nil
}

// flushAll empties every chain and deletes the user chains: a restore
// without --noflush starts each table it names this way.
func (t *table) flushAll() {
	for name, c := range t.chains {
		if c.builtin {
			t.flush(name)
		} else {
			t.deleteChain(name)
		}
	}
}

func (t *table) insert(chainName string, pos int, r rule) {
	c := t.writable(chainName)
	c.rules = slices.Insert(c.rules, pos, r)
	if r.jumpsTo != "" {
		t.refs[r.jumpsTo]++
	}
}

func (t *table) remove(chainName string, pos int) {
	c := t.writable(chainName)
	t.unref(c.rules[pos])
	c.rules = slices.Delete(c.rules, pos, pos+1)
}

func (t *table) unref(r rule) {
	if r.jumpsTo == "" {
		return
	}
	if t.refs[r.jumpsTo]--; t.refs[r.jumpsTo] <= 0 {
		delete(t.refs, r.jumpsTo)
	}
}

// order lists the chains as iptables-save does: built-in ones in hook
// order, then user chains by name.
func (t *table) order() []string {
	out := slices.Clone(builtinChains(t.name))
	var user []string
	for name, c := range t.chains {
		if !c.builtin {
			user = append(user, name)
		}
	}
	slices.Sort(user)
	return append(out, user...)
}
