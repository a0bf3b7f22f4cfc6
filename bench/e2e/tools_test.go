package e2e

import (
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// TestWithoutTheNFTAndIPSetTools runs kproxy on a node without the nft and
// ipset programs (most nodes have no nft). The userspace and iptables modes
// start, serve, and remove the table kube-proxy's nftables mode left (over
// netlink); the IPVS mode, whose start-up probe runs the ipset tool as
// kube-proxy's IPVS mode does, refuses to start and says what is missing.
func TestWithoutTheNFTAndIPSetTools(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		node := l.topo.Node
		leftover := !guest.InGuest() // the guest kernel has no nf_tables
		if leftover {
			node.MustExec("nft", "add", "table", "ip", "kube-proxy")
		}
		path := "PATH=" + lab.PathWithout(t, "nft", "ipset")
		if m.virtualServers {
			// Bounded: a kproxy that does not check would run on.
			args := append([]string{path, "timeout", "20", l.bin}, kproxyArgs(m, "--services-file="+l.manifest)...)
			out, err := node.Exec("env", args...)
			if err == nil || !strings.Contains(out, "ipset") || !strings.Contains(out, "not installed") {
				t.Fatalf("the IPVS mode without the ipset tool: err %v, want a refusal saying ipset is not installed:\n%s", err, out)
			}
			return
		}
		l.runKproxy(t, []string{path})
		l.wantBalanced(t, "TCP ClusterIP from the client", askHTTP(l.topo.Client, "http://"+webVIP+"/"))
		if leftover {
			if tables := node.MustExec("nft", "list", "tables"); strings.Contains(tables, "kube-proxy") {
				t.Fatalf("kube-proxy's nftables table survived kproxy's start:\n%s", tables)
			}
		}
	})
}
