package iptables

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// tableOrder is the order tables appear in a payload (restore.Payload).
var tableOrder = []string{string(rules.Mangle), string(rules.NAT), string(rules.Filter)}

func newPayload() *restore.Payload { return restore.NewPayload(tableOrder...) }

// restoreAll restores the non-empty payloads in order; the error says which
// of them failed ("restore 2 of 3: ...").
func restoreAll(ctx context.Context, t Tables, payloads []*restore.Payload) error {
	for i, p := range payloads {
		if p.Empty() {
			continue
		}
		if err := t.Restore(ctx, p.Bytes()); err != nil {
			return fmt.Errorf("restore %d of %d: %w", i+1, len(payloads), err)
		}
	}
	return nil
}

// writeChain declares c and writes its rules.
func writeChain(p *restore.Payload, c rules.Chain) { p.WriteChain(string(c.Table), c.Name, c.Rules) }

// sharedKey identifies a shared chain.
type sharedKey struct {
	table rules.Table
	chain string
}

// sharedRules is the content of the shared chains: per chain the port rules
// (kept sorted so full syncs are deterministic) and the fixed tail.
type sharedRules map[sharedKey][]string

func (sr sharedRules) add(r rules.SharedRule) {
	k := sharedKey{r.Table, r.Chain}
	sr[k] = append(sr[k], r.Rule)
}

// writeShared declares every shared chain with its port rules (sorted) and
// then its tail.
func writeShared(p *restore.Payload, shared []rules.SharedChain, portRules sharedRules) {
	for _, sc := range shared {
		rs := slices.Clone(portRules[sharedKey{sc.Table, sc.Name}])
		slices.Sort(rs)
		writeChain(p, rules.Chain{Table: sc.Table, Name: sc.Name, Rules: append(rs, sc.Tail...)})
	}
}

// sharedHasTail says, per shared chain, whether port rules must be inserted
// above fixed rules (-I CHAIN 1) rather than appended.
func sharedHasTail(shared []rules.SharedChain) map[sharedKey]bool {
	m := make(map[sharedKey]bool, len(shared))
	for _, sc := range shared {
		m[sharedKey{sc.Table, sc.Name}] = len(sc.Tail) > 0
	}
	return m
}

// portDiff writes into p what turns old into new for one service port
// (either may be nil: a port appearing or going away). Chains whose rules
// did not change are left alone; shared rules are deleted and inserted one
// by one, so the shared chains are never rewritten by a partial sync.
func portDiff(p *restore.Payload, old, new *rules.PortRules, hasTail map[sharedKey]bool) {
	oldChains := map[string]rules.Chain{}
	if old != nil {
		for _, c := range old.Chains {
			oldChains[c.Name] = c
		}
	}
	if new != nil {
		for _, c := range new.Chains {
			if o, ok := oldChains[c.Name]; ok && o.Table == c.Table && slices.Equal(o.Rules, c.Rules) {
				delete(oldChains, c.Name)
				continue
			}
			delete(oldChains, c.Name)
			writeChain(p, c)
		}
	}
	oldShared, newShared := sharedSet(old), sharedSet(new)
	if old != nil {
		for _, r := range old.Shared {
			if !newShared[r] {
				p.Delete(string(r.Table), r.Chain, r.Rule)
			}
		}
	}
	if new != nil {
		for _, r := range new.Shared {
			if oldShared[r] {
				continue
			}
			if hasTail[sharedKey{r.Table, r.Chain}] {
				p.Insert(string(r.Table), r.Chain, r.Rule)
			} else {
				p.Append(string(r.Table), r.Chain, r.Rule)
			}
		}
	}
	if old != nil {
		// Old chains go last, in reverse order: jumping chains before the
		// chains they jump to.
		for i := len(old.Chains) - 1; i >= 0; i-- {
			c := old.Chains[i]
			if _, gone := oldChains[c.Name]; gone {
				p.Remove(string(c.Table), c.Name)
			}
		}
	}
}

func sharedSet(pr *rules.PortRules) map[rules.SharedRule]bool {
	if pr == nil {
		return nil
	}
	m := make(map[rules.SharedRule]bool, len(pr.Shared))
	for _, r := range pr.Shared {
		m[r] = true
	}
	return m
}

// isPerPortChain says whether a chain belongs to one service port, and so
// goes when no port claims it; KUBE-XLB- is kube-proxy's name for KUBE-EXT-
// before 1.24, removed when found.
func isPerPortChain(name string) bool {
	return rules.IsPortChain(name) || strings.HasPrefix(name, "KUBE-XLB-")
}
