package rules

import (
	"slices"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
)

// TestNodePortsTailAndLocalhost checks how --nodeport-addresses,
// --iptables-localhost-nodeports and the family shape the end of nat
// KUBE-SERVICES, and when kubelet's KUBE-FIREWALL guard comes along.
func TestNodePortsTailAndLocalhost(t *testing.T) {
	const comment = `-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"`
	tests := []struct {
		name         string
		cfg          Config
		tail         []string
		kubeletGuard bool
	}{
		{"every local address, no localhost", v4Config(),
			[]string{`! -d 127.0.0.0/8 ` + comment + ` -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`}, false},
		{"every local address and localhost", testkit.With(v4Config(), func(c *Config) { c.LocalhostNodePorts = true }),
			[]string{comment + ` -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`}, true},
		{"a zero-length prefix is every address", testkit.With(v4Config(), func(c *Config) {
			c.NodePortAddresses, c.InterfaceAddrs = testkit.Prefixes("198.19.0.0/24", "0.0.0.0/0"), testkit.Addrs("198.19.0.1")
		}), []string{`! -d 127.0.0.0/8 ` + comment + ` -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`}, false},
		{"IPv6 never serves localhost", testkit.With(v6Config(), func(c *Config) { c.LocalhostNodePorts = true }),
			[]string{`! -d ::1/128 ` + comment + ` -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`}, false},
		{"listed addresses without loopback turn localhost off", testkit.With(v4Config(), func(c *Config) {
			c.LocalhostNodePorts = true
			c.NodePortAddresses = testkit.Prefixes("198.19.0.0/24")
			c.InterfaceAddrs = testkit.Addrs("127.0.0.1", "198.19.0.9", "198.19.0.1", "198.19.0.1", "198.19.3.1")
		}), []string{
			`-d 198.19.0.1/32 ` + comment + ` -j KUBE-NODEPORTS`,
			`-d 198.19.0.9/32 ` + comment + ` -j KUBE-NODEPORTS`,
		}, false},
		{"listed loopback needs localhost NodePorts", testkit.With(v4Config(), func(c *Config) {
			c.NodePortAddresses = testkit.Prefixes("127.0.0.1/32", "198.19.0.1/32")
			c.InterfaceAddrs = testkit.Addrs("127.0.0.1", "198.19.0.1")
		}), []string{`-d 198.19.0.1/32 ` + comment + ` -j KUBE-NODEPORTS`}, false},
		{"listed loopback with localhost NodePorts", testkit.With(v4Config(), func(c *Config) {
			c.LocalhostNodePorts = true
			c.NodePortAddresses = testkit.Prefixes("127.0.0.1/32", "198.19.0.1/32")
			c.InterfaceAddrs = testkit.Addrs("127.0.0.1", "198.19.0.1")
		}), []string{
			`-d 127.0.0.1/32 ` + comment + ` -j KUBE-NODEPORTS`,
			`-d 198.19.0.1/32 ` + comment + ` -j KUBE-NODEPORTS`,
		}, true},
		{"no address matches: no jump at all", testkit.With(v4Config(), func(c *Config) {
			c.NodePortAddresses, c.InterfaceAddrs = testkit.Prefixes("198.19.7.0/24"), testkit.Addrs("198.19.0.1")
		}), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustBuilder(t, tt.cfg)
			chains := b.SharedChains()
			i := slices.IndexFunc(chains, func(c SharedChain) bool { return c.Table == NAT && c.Name == Services })
			if i < 0 {
				t.Fatal("no nat KUBE-SERVICES")
			}
			if got := chains[i].Tail; !slices.Equal(got, tt.tail) {
				t.Errorf("nat KUBE-SERVICES tail\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.tail, "\n  "))
			}
			hasGuard := slices.ContainsFunc(chains, func(c SharedChain) bool { return c.Name == KubeletFirewall })
			hasJump := slices.ContainsFunc(b.Jumps(), func(j Jump) bool { return slices.Contains(j.Args, KubeletFirewall) })
			if hasGuard != tt.kubeletGuard || hasJump != tt.kubeletGuard {
				t.Errorf("KUBE-FIREWALL chain %v, jumps to it %v; want %v", hasGuard, hasJump, tt.kubeletGuard)
			}
		})
	}
}

// TestFixedChains checks the rules that depend on the masquerade bit and
// the detected kernel features.
func TestFixedChains(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		chain  string
		table  Table
		want   []string
		absent string
	}{
		{"mark chain sets bit 14", v4Config(), MarkMasq, NAT, []string{`-j MARK --set-xmark 0x4000/0x4000`}, ""},
		{"mark chain sets bit 0", testkit.With(v4Config(), func(c *Config) { c.MasqueradeBit = 0 }), MarkMasq, NAT,
			[]string{`-j MARK --set-xmark 0x1/0x1`}, ""},
		{"postrouting with bit 31 and random-fully", testkit.With(v4Config(), func(c *Config) { c.MasqueradeBit, c.RandomFully = 31, true }),
			Postrouting, NAT, []string{
				`-m mark ! --mark 0x80000000/0x80000000 -j RETURN`,
				`-j MARK --set-xmark 0x80000000/0x0`,
				`-m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`,
			}, ""},
		{"forward drops INVALID", v4Config(), Forward, Filter, []string{
			`-m conntrack --ctstate INVALID -j DROP`,
			`-m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT`,
			`-m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
		}, ""},
		{"forward with a liberal conntrack", testkit.With(v4Config(), func(c *Config) { c.ConntrackTCPBeLiberal = true }), Forward, Filter, []string{
			`-m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT`,
			`-m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
		}, "INVALID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chains := mustBuilder(t, tt.cfg).SharedChains()
			i := slices.IndexFunc(chains, func(c SharedChain) bool { return c.Table == tt.table && c.Name == tt.chain })
			if i < 0 {
				t.Fatalf("no %s %s", tt.table, tt.chain)
			}
			if got := chains[i].Tail; !slices.Equal(got, tt.want) {
				t.Errorf("%s %s\n  %s\nwant\n  %s", tt.table, tt.chain, strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// TestCanaries: the empty chains the mode watches, one per table.
func TestCanaries(t *testing.T) {
	var tables []Table
	for _, c := range mustBuilder(t, v4Config()).SharedChains() {
		if c.Name == Canary {
			if len(c.Tail) != 0 {
				t.Errorf("%s canary has rules %q", c.Table, c.Tail)
			}
			tables = append(tables, c.Table)
		}
	}
	if !slices.Equal(tables, []Table{Filter, NAT, Mangle}) {
		t.Errorf("canaries in %v, want filter, nat, mangle", tables)
	}
}

// TestJumpArgs: Args are command-line arguments for go-iptables (comment
// unquoted), Rule is the iptables-save text (comment quoted).
func TestJumpArgs(t *testing.T) {
	b := mustBuilder(t, v4Config())
	jumps := b.Jumps()
	if len(jumps) != 12 {
		t.Fatalf("%d jumps, want kube-proxy's 12", len(jumps))
	}
	first := jumps[0]
	wantArgs := []string{"-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment",
		"kubernetes externally-visible service portals", "-j", "KUBE-EXTERNAL-SERVICES"}
	if first.Table != Filter || first.Chain != "INPUT" || !first.First || !slices.Equal(first.Args, wantArgs) {
		t.Errorf("first jump %+v, want filter INPUT first %q", first, wantArgs)
	}
	if got, want := first.Rule(), `-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`; got != want {
		t.Errorf("Rule() = %s, want %s", got, want)
	}
	// Copies: a caller changing one cannot change the Builder's.
	jumps[0].Args[0] = "changed"
	if b.Jumps()[0].Args[0] != "-m" {
		t.Error("Jumps shares its Args with the caller")
	}
}
