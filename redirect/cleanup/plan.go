package cleanup

import (
	"fmt"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// TableRestore is the iptables-restore --noflush input that cleans one table.
type TableRestore struct {
	Table string
	Input string
}

// Plan computes, from one backend's iptables-save output for one family, the
// restore inputs that remove what scope says goes. Per table, in one atomic
// restore: the
// removed chains are flushed (a --noflush declaration empties a chain), rules
// elsewhere that jump to them are deleted, then the chains are deleted. Rules
// in chains the kept mode shares with a removed one also lose their matches
// on ipsets being destroyed, or the destroy would fail with "in use".
// Tables needing no change produce no input, so a clean node is a no-op.
func Plan(save string, scope Scope) ([]TableRestore, error) {
	sc := scope.resolve()
	tables, err := restore.ParseSave(save)
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
			plans = append(plans, TableRestore{Table: t.Name, Input: in})
		}
	}
	return plans, nil
}

func planTable(t restore.SavedTable, sc resolvedScope) (string, error) {
	removed := map[string]bool{}
	p := restore.NewPayload(t.Name)
	for _, c := range t.Chains {
		if !c.Builtin() && sc.removeChain(t.Name, c.Name) {
			removed[c.Name] = true
			p.Remove(t.Name, c.Name)
		}
	}
	for _, r := range t.Rules {
		if removed[r.Chain] {
			continue // emptied wholesale by the flush
		}
		// Only rules that survive are split: most rules of a removed mode
		// sit in its chains.
		args, err := r.Words()
		if err != nil {
			return "", fmt.Errorf("table %s: %w", t.Name, err)
		}
		if removed[restore.JumpTarget(args)] ||
			(sc.keptChain(t.Name, r.Chain) && matchesRemovedSet(args, sc)) {
			p.DeleteSaved(t.Name, r)
		}
	}
	return p.String(), nil
}

func matchesRemovedSet(args []string, sc resolvedScope) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--match-set" && sc.removeSet(args[i+1]) {
			return true
		}
	}
	return false
}
