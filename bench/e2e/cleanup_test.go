package e2e

import (
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// allRules dumps every table of both families and both iptables backends,
// without dated comments.
func (l *e2eLab) allRules(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, cmd := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		b.WriteString(lab.WithoutComments(l.topo.Node.MustExec(cmd)))
	}
	return b.String()
}

func TestCleanupRestoresTables(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, func(backends []string) string {
			return coreServices{backends: backends, stickyTimeout: 60}.render()
		})
		if l == nil {
			return
		}
		node := l.topo.Node
		// Rules of the operator's own, which must survive. They also make
		// the tables exist beforehand, as on any real node: kproxy, like
		// kube-proxy, cannot tell an empty table it created from one that
		// was there, and leaves tables (not its chains) in place.
		// kproxy writes both families where it can.
		for _, cmd := range []string{"iptables", "ip6tables"} {
			node.MustExec(cmd, "-t", "nat", "-A", "POSTROUTING", "-o", "to-client", "-j", "MASQUERADE")
			node.MustExec(cmd, "-t", "filter", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
			node.MustExec(cmd, "-t", "mangle", "-A", "PREROUTING", "-p", "tcp", "--dport", "22", "-j", "MARK", "--set-mark", "0x1")
		}
		// kubelet's KUBE-FIREWALL chain, which kube-proxy (and kproxy) write
		// a copy of and, as kubelet's, leave behind on cleanup.
		node.MustExec("iptables", "-t", "filter", "-N", "KUBE-FIREWALL")
		node.MustExec("iptables", "-t", "filter", "-A", "KUBE-FIREWALL", "!", "-s", "127.0.0.0/8", "-d", "127.0.0.0/8",
			"-m", "comment", "--comment", "block incoming localnet connections",
			"-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP")
		for _, chain := range []string{"INPUT", "OUTPUT"} {
			node.MustExec("iptables", "-t", "filter", "-I", chain, "-j", "KUBE-FIREWALL")
		}
		before := l.allRules(t)

		l.runKproxy(t, nil)
		lab.Eventually(t, "kproxy to program the services", func() (bool, string) {
			save := l.natRules(t)
			return strings.Contains(save, webVIP+"/32"), save
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
