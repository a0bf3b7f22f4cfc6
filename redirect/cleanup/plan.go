package cleanup

import (
	"fmt"

	"kproxy.dev/kproxy/redirect/restore"
	"kproxy.dev/kproxy/sync/mode"
)

// TableRestore is the iptables-restore --noflush input that cleans one table.
type TableRestore struct {
	Table string
	Input string
}

// Plan computes, from one backend's iptables-save output for one family, the
// restore inputs that remove what the modes other than keep installed (keep
// "" removes every mode's leftovers). Per table, in one atomic restore: the
// removed chains are flushed (a --noflush declaration empties a chain), rules
// elsewhere that jump to them are deleted, then the chains are deleted. Rules
// in chains the kept mode shares with a removed one also lose their matches
// on ipsets being destroyed, or the destroy would fail with "in use".
// Tables needing no change produce no input, so a clean node is a no-op.
func Plan(save string, keep mode.Name) ([]TableRestore, error) {
	tables, err := restore.ParseSave(save)
	if err != nil {
		return nil, err
	}
	var plans []TableRestore
	for _, t := range tables {
		in, err := planTable(t, keep)
		if err != nil {
			return nil, err
		}
		if in != "" {
			plans = append(plans, TableRestore{Table: t.Name, Input: in})
		}
	}
	return plans, nil
}

func planTable(t restore.SavedTable, keep mode.Name) (string, error) {
	removed := map[string]bool{}
	p := restore.NewPayload(t.Name)
	for _, c := range t.Chains {
		if !c.Builtin() && removeChain(t.Name, c.Name, keep) {
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
			(ownedChainKept(t.Name, r.Chain, keep) && matchesRemovedSet(args, keep)) {
			p.DeleteSaved(t.Name, r)
		}
	}
	return p.String(), nil
}

func matchesRemovedSet(args []string, keep mode.Name) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--match-set" && removeSet(args[i+1], keep) {
			return true
		}
	}
	return false
}
