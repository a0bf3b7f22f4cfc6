package fakeiptables

import (
	"slices"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// Save renders tables in iptables-save's format, without its timestamp
// comments: for each table "*name", a ":CHAIN POLICY [0:0]" line per chain
// (built-in chains in hook order, then user chains by name, as both real
// tools print them), the rules chain by chain as "-A CHAIN rule", and
// COMMIT. With table "" it renders every table that exists, by name; a
// named table is rendered even before anything wrote to it, holding its
// empty built-in chains, as the real tool prints it.
func (f *Fake) Save(tableName string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	if tableName != "" {
		if builtinChains(tableName) != nil {
			names = []string{tableName}
		}
	} else {
		for n := range f.tables {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	saved := make([]restore.SavedTable, 0, len(names))
	for _, n := range names {
		t := f.table(n)
		st := restore.SavedTable{Name: n}
		order := t.order()
		for _, c := range order {
			st.Chains = append(st.Chains, restore.SavedChain{Name: c, Policy: t.chains[c].policy})
		}
		for _, c := range order {
			for _, r := range t.chains[c].rules {
				st.Rules = append(st.Rules, restore.NewSavedRule(c, r.text))
			}
		}
		saved = append(saved, st)
	}
	return restore.FormatSave(saved...)
}

// Rules returns one chain's rules as "-A CHAIN rule" lines, nil if the
// chain does not exist.
func (f *Fake) Rules(tableName, chainName string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.table(tableName).chains[chainName]
	if !ok {
		return nil
	}
	out := make([]string, len(c.rules))
	for i, r := range c.rules {
		out[i] = restore.NewSavedRule(chainName, r.text).Line
	}
	return out
}

// HasChain says whether a chain exists.
func (f *Fake) HasChain(tableName, chainName string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.table(tableName).chains[chainName]
	return ok
}
