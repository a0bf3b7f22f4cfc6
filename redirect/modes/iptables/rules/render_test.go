package rules

import (
	"strings"
)

// tableOrder is the order the test renderer writes tables in.
func tableOrder() []Table { return []Table{Filter, NAT, Mangle} }

// ruleset is what a full sync installs, per table: every chain kproxy owns
// with its complete rule list, and the jumps in built-in chains in the
// order they end up in (each is inserted first, so the last ensured ends
// up on top). It is what iptables-save must show afterwards.
type ruleset struct {
	chains map[Table][]Chain
	jumps  map[Table][]Chain
}

// assemble merges the shared chains, the ports' rules and the jumps the way
// the mode lays them out: each shared chain holds the ports' rules, in port
// order, then its Tail; the ports' own chains follow.
func assemble(b *Builder, ports []PortRules) ruleset {
	rs := ruleset{chains: map[Table][]Chain{}, jumps: map[Table][]Chain{}}
	for _, sc := range b.SharedChains() {
		var rules []string
		for _, p := range ports {
			for _, r := range p.Shared {
				if r.Table == sc.Table && r.Chain == sc.Name {
					rules = append(rules, r.Rule)
				}
			}
		}
		rs.chains[sc.Table] = append(rs.chains[sc.Table], Chain{Table: sc.Table, Name: sc.Name, Rules: append(rules, sc.Tail...)})
	}
	for _, p := range ports {
		for _, c := range p.Chains {
			rs.chains[c.Table] = append(rs.chains[c.Table], c)
		}
	}
	for _, j := range b.Jumps() {
		builtins := rs.jumps[j.Table]
		i := indexOfChain(builtins, j.Chain)
		if i < 0 {
			builtins = append(builtins, Chain{Table: j.Table, Name: j.Chain})
			i = len(builtins) - 1
		}
		builtins[i].Rules = append([]string{j.Rule()}, builtins[i].Rules...)
		rs.jumps[j.Table] = builtins
	}
	return rs
}

func indexOfChain(cs []Chain, name string) int {
	for i, c := range cs {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// renderRestore renders a full-sync iptables-restore payload (for
// --noflush): per table the chain declarations, every rule, and the jumps
// inserted at the top of the built-in chains in the order the mode ensures
// them.
func renderRestore(b *Builder, ports []PortRules) string {
	rs := assemble(b, ports)
	var sb strings.Builder
	for _, tbl := range tableOrder() {
		sb.WriteString("*" + string(tbl) + "\n")
		for _, c := range rs.chains[tbl] {
			sb.WriteString(":" + c.Name + " - [0:0]\n")
		}
		for _, c := range rs.chains[tbl] {
			for _, r := range c.Rules {
				sb.WriteString("-A " + c.Name + " " + r + "\n")
			}
		}
		for _, j := range b.Jumps() {
			if j.Table == tbl {
				sb.WriteString("-I " + j.Chain + " 1 " + j.Rule() + "\n")
			}
		}
		sb.WriteString("COMMIT\n")
	}
	return sb.String()
}
