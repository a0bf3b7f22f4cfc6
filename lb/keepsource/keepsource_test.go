package keepsource

import (
	"net/netip"
	"testing"
)

func TestKeeps(t *testing.T) {
	a := netip.MustParseAddr
	view := &View{
		Endpoints: map[netip.Addr]bool{a("198.19.1.12"): true, a("fd00:19:1::12"): true},
		NodeAddrs: map[netip.Addr]bool{a("198.19.0.1"): true, a("198.19.1.1"): true},
		OnLink:    []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("198.19.1.0/24")},
	}
	for _, tc := range []struct {
		name       string
		view       *View
		client, ep netip.Addr
		want       bool
	}{
		{"a client elsewhere, a local endpoint", view, a("198.19.200.1"), a("198.19.1.12"), true},
		{"a client on another link of the node", view, a("198.19.0.2"), a("198.19.1.12"), true},
		{"IPv4-mapped addresses are IPv4", view, a("::ffff:198.19.200.1"), a("::ffff:198.19.1.12"), true},
		{"IPv6", view, a("fd00:19::2"), a("fd00:19:1::12"), true},
		{"an endpoint not on this node", view, a("198.19.200.1"), a("198.19.1.13"), false},
		{"hairpin: the endpoint is the client", view, a("198.19.1.12"), a("198.19.1.12"), false},
		{"a client on the endpoint's own link", view, a("198.19.1.11"), a("198.19.1.12"), false},
		{"a client on the node", view, a("198.19.0.1"), a("198.19.1.12"), false},
		{"a loopback client", view, a("127.0.0.1"), a("198.19.1.12"), false},
		{"a link-local client", view, a("fe80::1"), a("fd00:19:1::12"), false},
		{"families differ", view, a("fd00:19::2"), a("198.19.1.12"), false},
		{"no view yet", nil, a("198.19.200.1"), a("198.19.1.12"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := New(nil)
			if tc.view != nil {
				k.SetView(tc.view)
			}
			if got := k.Keeps(tc.client, tc.ep); got != tc.want {
				t.Errorf("Keeps(%v, %v) = %v, want %v", tc.client, tc.ep, got, tc.want)
			}
		})
	}
	var none *Keeper
	if none.Keeps(a("198.19.200.1"), a("198.19.1.12")) {
		t.Error("a nil Keeper keeps an address")
	}
}

func TestSocketRefusesNonIP(t *testing.T) {
	if _, _, err := New(nil).Socket(1, 6, netip.Addr{}, netip.MustParseAddrPort("198.19.1.12:80")); err == nil {
		t.Error("Socket with no client address succeeded")
	}
}
