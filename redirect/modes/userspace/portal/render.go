package portal

import (
	"slices"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// StaleChain is a chain of an older proxy (kube-proxy's userspace mode)
// that kproxy removes on a full sync, together with the rules jumping to it.
type StaleChain struct {
	Table string
	Name  string
	Jumps []restore.SavedRule
}

// staleChainNames are chains an earlier userspace proxy created that
// kproxy's rules replace: kube-proxy's KUBE-NODEPORT-NON-LOCAL ACCEPTed
// traffic to proxy ports, which the open-relay guard must not be preceded by.
func staleChainNames() map[string][]string {
	return map[string][]string{TableFilter: {ChainNodePortNonLocal}}
}

// Payload renders the iptables-restore --noflush input that replaces the
// contents of kproxy's chains with rs, one table section per table: every
// chain is declared, so rewritten whole, and no other chain is touched.
// Stale chains are flushed, unhooked and deleted in the same batch.
func Payload(rs *Ruleset, stale []StaleChain) []byte {
	p := restore.NewPayload()
	for _, t := range rs.Tables() {
		for _, c := range t.Chains {
			p.Declare(t.Name, c)
		}
		for _, r := range t.Rules {
			p.AppendWords(t.Name, r.Chain, r.Args)
		}
		for _, s := range stale {
			if s.Table != t.Name {
				continue
			}
			for _, j := range s.Jumps {
				p.DeleteSaved(t.Name, j)
			}
			p.Remove(t.Name, s.Name)
		}
	}
	return p.Bytes()
}

// findStale picks, from one table's iptables-save output, the stale chains
// present and the rules that jump to them.
func findStale(table, save string) ([]StaleChain, error) {
	tables, err := restore.ParseSave(save)
	if err != nil {
		return nil, err
	}
	var out []StaleChain
	for _, t := range tables {
		for _, name := range staleChainNames()[table] {
			if !slices.ContainsFunc(t.Chains, func(c restore.SavedChain) bool { return c.Name == name }) {
				continue
			}
			s := StaleChain{Table: table, Name: name}
			for _, r := range t.Rules {
				if r.Chain == name {
					continue
				}
				words, err := r.Words()
				if err != nil {
					return nil, err
				}
				if restore.JumpTarget(words) == name {
					s.Jumps = append(s.Jumps, r)
				}
			}
			out = append(out, s)
		}
	}
	return out, nil
}
