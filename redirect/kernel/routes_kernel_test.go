package kernel

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// TestDirectRoutes reads a real routing table: a pod bridge, two pods on
// veths of their own (as CNI's ptp plugin routes them, scope host and
// scope link), another node's pods behind a gateway and a gatewayless
// default route; only the routes to this node's own links count.
func TestDirectRoutes(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	lab.AddNodeLink(t, "198.19.0.1/24")
	for _, args := range [][]string{
		{"link", "add", "br-pods", "type", "bridge"},
		{"addr", "add", "198.19.1.1/24", "dev", "br-pods"},
		{"link", "set", "br-pods", "up"},
		{"link", "add", "veth-a", "type", "veth", "peer", "name", "veth-a-pod"},
		{"link", "set", "veth-a", "up"},
		{"route", "add", "198.19.16.5/32", "dev", "veth-a", "scope", "host"},
		{"link", "add", "veth-b", "type", "veth", "peer", "name", "veth-b-pod"},
		{"link", "set", "veth-b", "up"},
		{"route", "add", "198.19.16.6/32", "dev", "veth-b", "scope", "link"},
		{"route", "add", "198.19.32.0/24", "via", "198.19.0.2"},
		{"route", "add", "default", "dev", "veth-b"},
	} {
		lab.Run(t, "ip", args...)
	}
	got, err := DirectRoutes()
	if err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	for _, want := range []netip.Prefix{p("198.19.0.0/24"), p("198.19.1.0/24"), p("198.19.16.5/32"), p("198.19.16.6/32")} {
		if !slices.Contains(got, want) {
			t.Errorf("DirectRoutes() = %v, lacks %v", got, want)
		}
	}
	for _, p := range got {
		if p.Overlaps(netip.MustParsePrefix("198.19.32.0/24")) || p.Bits() == 0 {
			t.Errorf("DirectRoutes() = %v, holds %v: a gateway's route or a default one", got, p)
		}
	}
	for addr, want := range map[string]bool{"198.19.16.5": true, "198.19.1.9": true, "198.19.32.9": false, "198.19.16.7": false} {
		a := netip.MustParseAddr(addr)
		if direct := slices.ContainsFunc(got, func(p netip.Prefix) bool { return p.Contains(a) }); direct != want {
			t.Errorf("%s in DirectRoutes() = %v, want %v", addr, direct, want)
		}
	}
}

// BenchmarkDirectRoutes is the price of one look at the routes: the userspace
// mode pays it once per sync, and once per address of a pod that started
// since the sync (cached until the next one). The table holds a node's
// links, a gateway's route and n pods routed as CNI's ptp plugin routes
// them (a /32 per pod on a veth, scope host); kubelet's default is at most
// 110 pods per node.
func BenchmarkDirectRoutes(b *testing.B) {
	for _, pods := range []int{110, 1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			if lab.InFreshNetns(b) {
				return
			}
			lab.AddNodeLink(b, "198.19.0.1/24")
			lab.Run(b, "ip", "link", "add", "veth-pods", "type", "veth", "peer", "name", "veth-pods-peer")
			lab.Run(b, "ip", "link", "set", "veth-pods", "up")
			lab.Run(b, "ip", "route", "add", "198.19.32.0/24", "via", "198.19.0.2")
			var batch strings.Builder
			for i := range pods {
				fmt.Fprintf(&batch, "route add 198.19.%d.%d/32 dev veth-pods scope host\n", 64+i/250, 1+i%250)
			}
			cmd := exec.Command("ip", "-batch", "-")
			cmd.Stdin = strings.NewReader(batch.String())
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("adding %d pod routes: %v\n%s", pods, err, out)
			}
			for b.Loop() {
				routes, err := DirectRoutes()
				if err != nil {
					b.Fatal(err)
				}
				if len(routes) < pods {
					b.Fatalf("DirectRoutes() listed %d routes, want at least %d", len(routes), pods)
				}
			}
		})
	}
}
