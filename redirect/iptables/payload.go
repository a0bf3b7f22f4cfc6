package iptables

import (
	"bytes"
	"slices"
	"strings"

	"kproxy.dev/kproxy/redirect/iptables/rules"
)

// Payloads are iptables-restore inputs for --noflush. A chain declared with
// ":NAME - [0:0]" is created or flushed; "-X" deletes a chain (declared, so
// flushed, earlier in the same transaction, as nf_tables refuses to delete a
// chain that still has rules).

// tableOrder is the order tables appear in a payload.
var tableOrder = []rules.Table{rules.Mangle, rules.NAT, rules.Filter}

// section collects one table's part of a payload.
type section struct {
	declare []string // chain names to create or flush
	lines   []string // -A/-I/-D lines, in order
	remove  []string // chain names to flush and delete, after lines
}

func (s *section) empty() bool { return len(s.declare) == 0 && len(s.lines) == 0 && len(s.remove) == 0 }

// payload is a restore input under construction, one section per table.
type payload struct {
	tables map[rules.Table]*section
	chains int // chains declared or removed: the cost unit of nf_tables restores
}

func newPayload() *payload { return &payload{tables: map[rules.Table]*section{}} }

func (p *payload) section(t rules.Table) *section {
	s, ok := p.tables[t]
	if !ok {
		s = &section{}
		p.tables[t] = s
	}
	return s
}

// writeChain declares c and appends its rules.
func (p *payload) writeChain(c rules.Chain) {
	s := p.section(c.Table)
	s.declare = append(s.declare, c.Name)
	for _, r := range c.Rules {
		s.lines = append(s.lines, "-A "+c.Name+" "+r)
	}
	p.chains++
}

// removeChain flushes and deletes a chain nothing references any more.
func (p *payload) removeChain(t rules.Table, name string) {
	s := p.section(t)
	s.remove = append(s.remove, name)
	p.chains++
}

func (p *payload) line(t rules.Table, l string) { s := p.section(t); s.lines = append(s.lines, l) }

func (p *payload) empty() bool {
	for _, s := range p.tables {
		if !s.empty() {
			return false
		}
	}
	return true
}

// bytes renders the payload: per table, declarations, then rules, then
// deletions, then COMMIT.
func (p *payload) bytes() []byte {
	var b bytes.Buffer
	for _, t := range tableOrder {
		s, ok := p.tables[t]
		if !ok || s.empty() {
			continue
		}
		b.WriteString("*" + string(t) + "\n")
		for _, name := range s.declare {
			b.WriteString(":" + name + " - [0:0]\n")
		}
		for _, name := range s.remove {
			b.WriteString(":" + name + " - [0:0]\n")
		}
		for _, l := range s.lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		for _, name := range s.remove {
			b.WriteString("-X " + name + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

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
func (p *payload) writeShared(shared []rules.SharedChain, portRules sharedRules) {
	for _, sc := range shared {
		rs := slices.Clone(portRules[sharedKey{sc.Table, sc.Name}])
		slices.Sort(rs)
		p.writeChain(rules.Chain{Table: sc.Table, Name: sc.Name, Rules: append(rs, sc.Tail...)})
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
func (p *payload) portDiff(old, new *rules.PortRules, hasTail map[sharedKey]bool) {
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
			p.writeChain(c)
		}
	}
	oldShared, newShared := sharedSet(old), sharedSet(new)
	if old != nil {
		for _, r := range old.Shared {
			if !newShared[r] {
				p.line(r.Table, "-D "+r.Chain+" "+r.Rule)
			}
		}
	}
	if new != nil {
		for _, r := range new.Shared {
			if oldShared[r] {
				continue
			}
			if hasTail[sharedKey{r.Table, r.Chain}] {
				p.line(r.Table, "-I "+r.Chain+" 1 "+r.Rule)
			} else {
				p.line(r.Table, "-A "+r.Chain+" "+r.Rule)
			}
		}
	}
	if old != nil {
		// Old chains go last, in reverse order: jumping chains before the
		// chains they jump to.
		for i := len(old.Chains) - 1; i >= 0; i-- {
			c := old.Chains[i]
			if _, gone := oldChains[c.Name]; gone {
				p.removeChain(c.Table, c.Name)
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

// chainsInDump lists the chain names an iptables-save dump of one table
// declares.
func chainsInDump(dump string) []string {
	var out []string
	for line := range strings.SplitSeq(dump, "\n") {
		if strings.HasPrefix(line, ":") {
			if name, _, ok := strings.Cut(line[1:], " "); ok {
				out = append(out, name)
			}
		}
	}
	return out
}
