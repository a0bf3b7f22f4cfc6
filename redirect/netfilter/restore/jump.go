package restore

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Jump is one rule in a built-in chain that enters one of a mode's chains.
// Such rules live in chains other software also writes to, so they are
// added where missing, never rewritten with the chain.
type Jump struct {
	Table, Chain string
	// First: inserted at the top of Chain; otherwise appended.
	First bool
	// Args is the rule as iptables-save prints it after "-A Chain", split
	// into words (a comment is one word, unquoted).
	Args []string
}

// Target is the chain the rule jumps or goes to (see JumpTarget), or its
// last word when it names none.
func (j Jump) Target() string {
	if t := JumpTarget(j.Args); t != "" || len(j.Args) == 0 {
		return t
	}
	return j.Args[len(j.Args)-1]
}

// EnsureJumps adds, in order, each jump of jumps that the built-in chains
// lack, and returns the ones it added. A First jump is inserted at position
// 1, so of several First jumps into one chain the last listed ends up on
// top. It runs one iptables-save per table the jumps live in and, only when
// some are missing, one restore adding them all, whatever their number (a
// command per check and per addition cost a userspace or IPVS mode start
// sixteen commands per family). Rules are compared as iptables-save prints
// them, which is how Jump.Args spells them. On an error it returns none:
// the restore commits table by table, so the tables before the failing one
// have their jumps, and the next call adds what is still missing.
func (r *Runner) EnsureJumps(ctx context.Context, jumps []Jump) ([]Jump, error) {
	var tables []string
	for _, j := range jumps {
		if !slices.Contains(tables, j.Table) {
			tables = append(tables, j.Table)
		}
	}
	present := map[string]bool{} // "table -A chain spec"
	for _, table := range tables {
		dump, err := r.Save(ctx, table)
		if err != nil {
			return nil, fmt.Errorf("checking the jump rules: %w", err)
		}
		saved, err := ParseSave(dump)
		if err != nil {
			return nil, fmt.Errorf("checking the jump rules in the %s table: %w", table, err)
		}
		for _, st := range saved {
			for _, rule := range st.Rules {
				present[st.Name+" "+rule.Line] = true
			}
		}
	}
	p := NewPayload(tables...)
	var added []Jump
	for _, j := range jumps {
		spec := JoinRule(j.Args)
		if present[j.Table+" -A "+j.Chain+" "+spec] {
			continue
		}
		if j.First {
			p.Insert(j.Table, j.Chain, spec)
		} else {
			p.Append(j.Table, j.Chain, spec)
		}
		added = append(added, Jump{Table: j.Table, Chain: j.Chain, First: j.First, Args: slices.Clone(j.Args)})
	}
	if len(added) == 0 {
		return nil, nil
	}
	if err := r.Restore(ctx, p.Bytes()); err != nil {
		targets := make([]string, len(added))
		for i, j := range added {
			targets[i] = j.Table + "/" + j.Chain + " -> " + j.Target()
		}
		return nil, fmt.Errorf("adding the jump rules %s: %w", strings.Join(targets, ", "), err)
	}
	return added, nil
}
