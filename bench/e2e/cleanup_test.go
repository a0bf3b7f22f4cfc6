package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// allRules dumps every table of both families and both iptables backends,
// without dated comments and chain counters (the legacy backend counts the
// test's own traffic there), and with the IPVS mode the virtual servers, the
// ipsets and the links too, the local routing tables (the userspace mode's
// local portals add routes there) and every other nftables table. A backend
// the kernel lacks (nf_tables in the guest) shows as its error, the same
// before and after.
func (l *e2eLab) allRules(t *testing.T) string {
	t.Helper()
	cmds := [][]string{{"ip", "-4", "route", "show", "table", "local"}, {"ip", "-6", "route", "show", "table", "local"}}
	if l.mode.virtualServers {
		cmds = append(cmds, []string{"ipvsadm", "-Sn"}, []string{"ipset", "list", "-n"}, []string{"ip", "-o", "link", "show"})
	}
	var b strings.Builder
	b.WriteString(l.iptablesDump(t))
	for _, cmd := range cmds {
		out, err := l.topo.Node.Exec(cmd[0], cmd[1:]...)
		writeDump(t, &b, cmd, out, err)
	}
	b.WriteString(l.nftTablesBesidesIPTables(t))
	return b.String()
}

// iptablesDump is allRules' part from the iptables backends: every table
// of both families and both backends.
func (l *e2eLab) iptablesDump(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, cmd := range [][]string{{"iptables-nft-save"}, {"ip6tables-nft-save"}, {"iptables-legacy-save"}, {"ip6tables-legacy-save"}} {
		out, err := l.topo.Node.Exec(cmd[0], cmd[1:]...)
		writeDump(t, &b, cmd, out, err)
	}
	return b.String()
}

// writeDump adds the output of one of allRules' commands to b, normalised
// as allRules says; an error fails t but in the guest, whose kernel lacks
// some of what the commands read.
func writeDump(t *testing.T, b *strings.Builder, cmd []string, out string, err error) {
	t.Helper()
	if err != nil && !guest.InGuest() {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd, " "), err, out)
	}
	chainCounters := regexp.MustCompile(`\[\d+:\d+\]`)
	// IPv6 link-local addresses appear on the lab's links whenever their
	// address autoconfiguration finishes, kproxy or not.
	linkLocal := regexp.MustCompile(`(?m)^local fe80:.*\n`)
	fmt.Fprintf(b, "$ %s\n%s", strings.Join(cmd, " "), linkLocal.ReplaceAllString(chainCounters.ReplaceAllString(lab.WithoutComments(out), "[0:0]"), ""))
	if err != nil {
		fmt.Fprintf(b, "(%v)\n", err)
	}
}

// nftTablesBesidesIPTables lists every nftables table but iptables-nft's:
// the nftables mode's, an operator's own. Where nf_tables is missing (the
// guest kernel), nft's error shows in place, the same before and after.
func (l *e2eLab) nftTablesBesidesIPTables(t *testing.T) string {
	t.Helper()
	// iptables-nft's tables, which iptables-nft-save dumps already. It
	// adds their base chains on first use and leaves them, empty, when
	// rules go: nft's own listing of them would differ after any kproxy
	// run that wrote iptables rules.
	xtablesTables := regexp.MustCompile(`^table (ip|ip6) (filter|nat|mangle|raw|security)$`)
	var b strings.Builder
	tables, err := l.topo.Node.Exec("nft", "list", "tables")
	b.WriteString("$ nft list tables\n" + tables)
	if err != nil {
		if !guest.InGuest() {
			t.Fatalf("nft list tables: %v\n%s", err, tables)
		}
		fmt.Fprintf(&b, "(%v)\n", err)
		return b.String()
	}
	for _, line := range strings.Split(strings.TrimSpace(tables), "\n") {
		if line == "" || xtablesTables.MatchString(line) {
			continue
		}
		table := strings.Fields(line)
		if len(table) != 3 {
			t.Fatalf("nft list tables printed %q, want \"table <family> <name>\"", line)
		}
		out, err := l.topo.Node.Exec("nft", "list", "table", table[1], table[2])
		if err != nil {
			t.Fatalf("nft list table %s %s: %v\n%s", table[1], table[2], err, out)
		}
		b.WriteString("$ nft list table " + table[1] + " " + table[2] + "\n" + normalizeNFT(out))
	}
	return b.String()
}

func TestCleanupRestoresTables(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		node := l.topo.Node
		addOperatorRules(t, node)
		// A local route of someone else's, as an anycast daemon adds.
		node.MustExec("ip", "route", "add", "local", "198.18.9.9/32", "dev", "lo", "table", "local")
		before := l.allRules(t)

		l.runKproxy(t, nil)
		lab.Eventually(t, "kproxy to program the services", func() (bool, string) {
			return l.programs(t, webVIP)
		})
		if err := l.kproxy.Stop(); err != nil {
			t.Logf("stopping kproxy: %v", err)
		}
		if out, err := node.Exec(l.bin, "--cleanup"); err != nil {
			t.Fatalf("kproxy --cleanup: %v\n%s", err, out)
		}
		if after := l.allRules(t); after != before {
			t.Fatalf("--cleanup did not restore the tables.\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// userNFTables is an operator's own nftables ruleset, which kproxy's
// cleanup must leave alone: a filter table of the inet family and a table
// whose name starts like kube-proxy's.
const userNFTables = `table inet filter {
	chain input {
		type filter hook input priority filter; policy accept;
		tcp dport 22 counter accept
	}
}
table ip kube-proxy-audit {
	chain output {
		type filter hook output priority filter; policy accept;
		tcp dport 9999 counter
	}
}
`

// nftScript runs nft -f with script on h, failing t with nft's output if
// it fails.
func nftScript(t *testing.T, h *lab.Host, script string) {
	t.Helper()
	cmd := h.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f on %s: %v\n%s\nthe script:\n%s", h.Name, err, out, script)
	}
}

// addOperatorRules adds to node what an operator's node holds before kproxy
// runs, which kproxy must leave as it was: iptables rules of the
// operator's own and kubelet's KUBE-FIREWALL chain where netfilter is, and
// an nftables ruleset of the operator's own where nf_tables has the ip
// family (not in the guest kernel).
func addOperatorRules(t *testing.T, node *lab.Host) {
	t.Helper()
	if !guest.WithoutNetfilter() {
		// Rules of the operator's own, which must survive. They also make
		// the tables exist beforehand, as on any real node: kproxy, like
		// kube-proxy, cannot tell an empty table it created from one that
		// was there, and leaves tables (not its chains) in place.
		// kproxy writes both families where it can.
		for _, cmd := range []string{iptablesTool("iptables"), iptablesTool("ip6tables")} {
			node.MustExec(cmd, "-t", "nat", "-A", "POSTROUTING", "-o", "to-client", "-j", "MASQUERADE")
			node.MustExec(cmd, "-t", "filter", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
			node.MustExec(cmd, "-t", "mangle", "-A", "PREROUTING", "-p", "tcp", "--dport", "22", "-j", "MARK", "--set-mark", "0x1")
		}
		// kubelet's KUBE-FIREWALL chain, which kube-proxy (and kproxy) write
		// a copy of and, as kubelet's, leave behind on cleanup.
		node.MustExec(iptablesTool("iptables"), "-t", "filter", "-N", "KUBE-FIREWALL")
		node.MustExec(iptablesTool("iptables"), "-t", "filter", "-A", "KUBE-FIREWALL", "!", "-s", "127.0.0.0/8", "-d", "127.0.0.0/8",
			"-m", "comment", "--comment", "block incoming localnet connections",
			"-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP")
		for _, chain := range []string{"INPUT", "OUTPUT"} {
			node.MustExec(iptablesTool("iptables"), "-t", "filter", "-I", chain, "-j", "KUBE-FIREWALL")
		}
	}
	if !guest.InGuest() {
		// An nftables table of the operator's own (the guest kernel has
		// no nf_tables family to make one in).
		nftScript(t, node, userNFTables)
	}
}
