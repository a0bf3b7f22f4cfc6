package e2e

import (
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// TestWithoutTheNFTAndIPSetTools runs kproxy on a node without the nft and
// ipset programs (most nodes have no nft). Every mode starts and serves: the
// IPVS mode probes and manages its sets over netlink, and cleanup removes the
// table kube-proxy's nftables mode left, also over netlink.
func TestWithoutTheNFTAndIPSetTools(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		node := l.topo.Node
		if m.nftablesRules {
			// The nftables mode writes its rules with nft, as kube-proxy's
			// does: without it kproxy must refuse to start, naming it.
			wantRefusesWithoutNFT(t, l)
			return
		}
		leftover := !guest.InGuest() // the guest kernel has no nf_tables
		if leftover {
			node.MustExec("nft", "add", "table", "ip", "kube-proxy")
		}
		l.runKproxy(t, []string{"PATH=" + lab.PathWithout(t, "nft", "ipset")})
		l.wantBalanced(t, "TCP ClusterIP from the client", askHTTP(l.topo.Client, "http://"+webVIP+"/"))
		if leftover {
			if tables := node.MustExec("nft", "list", "tables"); strings.Contains(tables, "kube-proxy") {
				t.Fatalf("kube-proxy's nftables table survived kproxy's start:\n%s", tables)
			}
		}
	})
}

// wantRefusesWithoutNFT starts kproxy without nft on its PATH and wants it
// to exit at once with an error naming the missing tool and leaving no
// table of its own behind.
func wantRefusesWithoutNFT(t *testing.T, l *e2eLab) {
	t.Helper()
	args := kproxyArgs(l.mode, "--services-file="+l.manifest)
	kp := l.topo.Node.Start("env", append([]string{"PATH=" + lab.PathWithout(t, "nft"), l.bin}, args...)...)
	select {
	case <-kp.Exited():
	case <-time.After(lab.SetupBound()):
		t.Fatalf("kproxy --proxy-mode=nftables without nft still runs after %v:\n%s", lab.SetupBound(), kp.Log())
	}
	log := kp.Log()
	if kp.ExitCode() == 0 || !strings.Contains(log, "nft tool") {
		t.Fatalf("kproxy --proxy-mode=nftables without nft exited with code %d; want a failure naming the nft tool:\n%s", kp.ExitCode(), log)
	}
	t.Logf("without nft: %s", lastLine(log))
	if tables := l.topo.Node.MustExec("nft", "list", "tables"); strings.Contains(tables, nftTable) {
		t.Errorf("kproxy left an nftables table behind although it could not run:\n%s", tables)
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
