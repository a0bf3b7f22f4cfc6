package e2e

import (
	"strings"
	"testing"

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
