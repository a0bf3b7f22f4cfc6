package keepsource

import (
	"errors"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/nodepods"
)

func TestKeeps(t *testing.T) {
	a := netip.MustParseAddr
	view := &View{
		Endpoints: map[netip.Addr]bool{a("198.19.1.12"): true, a("fd00:19:1::12"): true},
		NodeAddrs: map[netip.Addr]bool{a("198.19.0.1"): true, a("198.19.1.1"): true},
		OnLink:    []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("198.19.1.0/24")},
		Pods: &nodepods.Set{
			Known:    []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24")},
			Detector: []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24"), netip.MustParsePrefix("198.19.4.0/22")},
			// A pod that came after the sync, on a veth of its own.
			Direct: func(a netip.Addr) bool { return a == netip.MustParseAddr("198.19.6.7") },
		},
		Services: map[netip.Addr]bool{a("198.19.8.8"): true},
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
		{"an endpoint not on this node, a client elsewhere", view, a("198.19.200.1"), a("198.19.9.13"), false},
		{"an endpoint not on this node, a pod of this node", view, a("198.19.1.11"), a("198.19.9.13"), true},
		{"an endpoint not on this node, a pod of another node", view, a("198.19.5.11"), a("198.19.9.13"), false},
		{"an endpoint not on this node, a pod of this node on a route of its own", view, a("198.19.6.7"), a("198.19.9.13"), true},
		{"an endpoint not on this node on the client pod's own link", view, a("198.19.1.11"), a("198.19.1.13"), false},
		{"a pod of this node, a service address as endpoint", view, a("198.19.1.11"), a("198.19.8.8"), false},
		{"a service address as client (the node's connection to a local portal), a local endpoint", view, a("198.19.8.8"), a("198.19.1.12"), false},
		{"a pod of this node, the node as endpoint", view, a("198.19.1.11"), a("198.19.0.1"), false},
		{"a host on the node's uplink (no pod), an endpoint elsewhere", view, a("198.19.0.2"), a("198.19.9.13"), false},
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

// steering records the flows it steers, or fails every Add with err.
type steering struct {
	err   error
	flows []Flow
}

func (s *steering) Add(f Flow) error {
	if s.err != nil {
		return s.err
	}
	s.flows = append(s.flows, f)
	return nil
}

func (s *steering) Remove(Flow) error { return nil }

func TestOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a transparent socket needs CAP_NET_ADMIN")
	}
	a := netip.MustParseAddr
	client, ep := a("198.19.200.1"), netip.MustParseAddrPort("198.19.1.12:80")
	view := &View{Endpoints: map[netip.Addr]bool{ep.Addr(): true}}
	for _, tc := range []struct {
		name     string
		steerErr error
		nilKeep  bool
		wanted   bool
		wantKept bool
		wantErr  bool // a keepErr: the kept socket failed, a plain one took its place
	}{
		{name: "kept", wanted: true, wantKept: true},
		{name: "the service does not keep addresses", wanted: false},
		{name: "no Keeper", nilKeep: true, wanted: true},
		{name: "steering fails: a plain socket instead", steerErr: errors.New("no rule"), wanted: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &steering{err: tc.steerErr}
			k := New(s)
			k.SetView(view)
			if tc.nilKeep {
				k = nil
			}
			fd, f, keepErr, err := k.Open(tc.wanted, unix.SOCK_STREAM, unix.IPPROTO_TCP, client, ep)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer unix.Close(fd)
			if (keepErr != nil) != tc.wantErr {
				t.Errorf("keepErr = %v, want one: %v", keepErr, tc.wantErr)
			}
			if f.IsValid() != tc.wantKept || (len(s.flows) == 1) != tc.wantKept {
				t.Fatalf("flow %+v, steered %v; want kept: %v", f, s.flows, tc.wantKept)
			}
			sa, err := unix.Getsockname(fd)
			if err != nil {
				t.Fatal(err)
			}
			bound := sa.(*unix.SockaddrInet4)
			got := netip.AddrFrom4(bound.Addr)
			switch {
			case tc.wantKept && (got != client || f.Local != netip.AddrPortFrom(client, uint16(bound.Port)) || f.Endpoint != ep):
				t.Errorf("kept socket bound to %v:%d, flow %+v; want the client's address %v", got, bound.Port, f, client)
			case !tc.wantKept && got.IsValid() && !got.IsUnspecified():
				t.Errorf("plain socket bound to %v, want unbound", got)
			}
		})
	}
}
