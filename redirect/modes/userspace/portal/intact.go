package portal

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// ruleCounts is, per table and chain, how many rules kproxy last wrote.
type ruleCounts map[string]map[string]int

func countRules(rs *Ruleset) ruleCounts {
	out := ruleCounts{}
	for _, t := range rs.Tables() {
		chains := map[string]int{}
		for _, c := range t.Chains {
			chains[c] = 0
		}
		for _, r := range t.Rules {
			chains[r.Chain]++
		}
		out[t.Name] = chains
	}
	return out
}

// Intact reads the tables kproxy's portals live in and reports what is not
// as the last Apply left it: a chain gone or holding another number of
// rules (a flush, with or without deleting the chains), or a jump rule from
// a built-in chain gone. "" means intact, or nothing applied yet. A
// firewall reload is the usual cause; the mode then rewrites everything.
// kube-proxy's old userspace proxier re-added its jumps every sync but
// never noticed its chains emptied under it.
func (a *Applier) Intact(ctx context.Context) (string, error) {
	a.mu.Lock()
	written := a.written
	a.mu.Unlock()
	for _, table := range slices.Sorted(maps.Keys(written)) {
		save, err := a.restore.Save(ctx, table)
		if err != nil {
			return "", fmt.Errorf("checking the portal rules: %w", err)
		}
		tables, err := restore.ParseSave(save)
		if err != nil {
			return "", fmt.Errorf("checking the portal rules in the %s table: %w", table, err)
		}
		if problem := compareTable(table, written[table], tables); problem != "" {
			return problem, nil
		}
	}
	return "", nil
}

// compareTable compares one table's dump with what kproxy wrote there.
func compareTable(table string, want map[string]int, dump []restore.SavedTable) string {
	var saved restore.SavedTable
	for _, t := range dump {
		if t.Name == table {
			saved = t
		}
	}
	for _, chain := range slices.Sorted(maps.Keys(want)) {
		if !slices.ContainsFunc(saved.Chains, func(c restore.SavedChain) bool { return c.Name == chain }) {
			return fmt.Sprintf("chain %s of the %s table is gone", chain, table)
		}
		got := 0
		for _, r := range saved.Rules {
			if r.Chain == chain {
				got++
			}
		}
		if got != want[chain] {
			return fmt.Sprintf("chain %s of the %s table holds %d rules, kproxy wrote %d", chain, table, got, want[chain])
		}
	}
	for _, j := range Jumps() {
		if j.Table != table {
			continue
		}
		found := slices.ContainsFunc(saved.Rules, func(r restore.SavedRule) bool {
			words, err := r.Words()
			return err == nil && r.Chain == j.Chain && slices.Equal(words, j.Args)
		})
		if !found {
			return fmt.Sprintf("the jump from %s to %s in the %s table is gone", j.Chain, j.Target(), table)
		}
	}
	return ""
}
