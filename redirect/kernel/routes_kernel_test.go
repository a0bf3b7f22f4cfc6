package kernel

import (
	"net/netip"
	"slices"
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
