package portal

import (
	"bytes"
	"fmt"
	"strings"
)

// StaleChain is a chain of an older proxy (kube-proxy's userspace mode)
// that kproxy removes on a full sync, together with the rules jumping to it
// (as iptables-save printed them).
type StaleChain struct {
	Table string
	Name  string
	Jumps []string // "-A INPUT ... -j NAME" lines from iptables-save
}

// staleChainNames are chains an earlier userspace proxy created that
// kproxy's rules replace: kube-proxy's KUBE-NODEPORT-NON-LOCAL ACCEPTed
// traffic to proxy ports, which the open-relay guard must not be preceded by.
func staleChainNames() map[string][]string {
	return map[string][]string{TableFilter: {ChainNodePortNonLocal}}
}

// Payload renders the iptables-restore --noflush input that replaces the
// contents of kproxy's chains with rs, one table section per table. A
// declaration ":CHAIN - [0:0]" creates the chain or, under --noflush, empties
// it, so every chain is rewritten whole and no other chain is touched.
// Stale chains are flushed, unhooked and deleted in the same batch.
func Payload(rs *Ruleset, stale []StaleChain) []byte {
	var b bytes.Buffer
	for _, t := range rs.Tables() {
		fmt.Fprintf(&b, "*%s\n", t.Name)
		for _, c := range t.Chains {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c)
		}
		var staleHere []StaleChain
		for _, s := range stale {
			if s.Table == t.Name {
				staleHere = append(staleHere, s)
				fmt.Fprintf(&b, ":%s - [0:0]\n", s.Name)
			}
		}
		for _, r := range t.Rules {
			b.WriteString(r.String())
			b.WriteByte('\n')
		}
		for _, s := range staleHere {
			for _, j := range s.Jumps {
				b.WriteString("-D" + strings.TrimPrefix(j, "-A"))
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "-X %s\n", s.Name)
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// findStale picks, from one table's iptables-save output, the stale chains
// present and the rules that jump to them.
func findStale(table, save string) []StaleChain {
	names := staleChainNames()[table]
	var out []StaleChain
	for _, name := range names {
		if !strings.Contains(save, ":"+name+" ") {
			continue
		}
		s := StaleChain{Table: table, Name: name}
		for _, line := range strings.Split(save, "\n") {
			if strings.HasPrefix(line, "-A ") && !strings.HasPrefix(line, "-A "+name+" ") &&
				(strings.HasSuffix(line, " -j "+name) || strings.Contains(line, " -j "+name+" ")) {
				s.Jumps = append(s.Jumps, line)
			}
		}
		out = append(out, s)
	}
	return out
}
