package userspace

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestDropAllFilter: a listener with the drop-all filter leaves connection
// attempts unanswered (the client times out, as behind a DROP rule), and
// serves again once the filter is detached.
func TestDropAllFilter(t *testing.T) {
	l, err := localPortalListenConfig().Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ln := l.(*net.TCPListener)
	raw, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	dial := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp4", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, step := range []struct {
		drop     bool
		wantDrop bool
	}{{drop: true, wantDrop: true}, {drop: true, wantDrop: true}, {drop: false}, {drop: false}} {
		if err := setDropAll(raw, step.drop); err != nil {
			t.Fatalf("setDropAll(%t): %v", step.drop, err)
		}
		err := dial()
		var ne net.Error
		if dropped := errors.As(err, &ne) && ne.Timeout(); dropped != step.wantDrop {
			t.Fatalf("with the filter %t: dial error %v, want dropped=%t", step.drop, err, step.wantDrop)
		}
	}
}

// socketMatchingApplier is a recordingApplier whose iptables can match the
// receiving socket, or (refuse set) cannot, as without xt_socket.
type socketMatchingApplier struct {
	recordingApplier
	refuse error
}

func (a *socketMatchingApplier) SupportsSocketMatch(context.Context) error { return a.refuse }

// TestRelaySocketsMarkedWhereRulesCheckThem: where the family's iptables
// can match the receiving socket, every TCP and UDP relay socket is
// IP_TRANSPARENT and the rules let redirected traffic only into such
// sockets; where it cannot, neither, and the rules keep the conntrack check.
func TestRelaySocketsMarkedWhereRulesCheckThem(t *testing.T) {
	tests := []struct {
		name            string
		refuse          error
		wantTransparent bool
		wantRule        string
	}{
		{"iptables matches sockets", nil, true, "-m conntrack --ctstate DNAT -m socket --transparent --nowildcard -j RETURN"},
		{"no xt_socket", errors.New(`iptables-restore: Couldn't load match "socket"`), false,
			`--comment "redirected connections the refusals let through" -m conntrack --ctstate DNAT -j RETURN`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &socketMatchingApplier{refuse: tt.refuse}
			m := newRedirectMode(t, a)
			tr := servicemap.NewTracker("node-a", nil)
			tr.OnServiceUpdate(service("web", "198.18.0.10", v1.ProtocolTCP, 0))
			tr.OnEndpointSliceUpdate(slice("web", v1.ProtocolTCP, "127.0.0.1"))
			tr.OnServiceUpdate(service("dns", "198.18.0.53", v1.ProtocolUDP, 0))
			tr.OnEndpointSliceUpdate(slice("dns", v1.ProtocolUDP, "127.0.0.1"))
			tr.OnSynced()
			snap, changes := tr.Snapshot()
			if err := m.Sync(context.Background(), snap, changes); err != nil {
				t.Fatal(err)
			}
			if rules := a.rules(); !strings.Contains(rules, tt.wantRule) {
				t.Errorf("rules lack %q:\n%s", tt.wantRule, rules)
			}
			sockets := 0
			for key, r := range m.relays {
				for ap, s := range r.servers {
					sockets++
					var on int
					var sockErr error
					if err := s.raw.Control(func(fd uintptr) { on, sockErr = unix.GetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT) }); err != nil || sockErr != nil {
						t.Fatalf("reading IP_TRANSPARENT of %s %s: %v %v", key, ap, err, sockErr)
					}
					if (on == 1) != tt.wantTransparent {
						t.Errorf("%s relay socket %s: IP_TRANSPARENT %d, want %t", key, ap, on, tt.wantTransparent)
					}
				}
			}
			if sockets != 2 {
				t.Errorf("%d relay sockets, want 2 (one TCP, one UDP)", sockets)
			}
		})
	}
}

// TestDropUnlessFilter: a UDP socket with the filter receives datagrams
// from the allowed sources of its family only, and from its own address
// (the node's connection to a local service address) where the filter lets
// that through; loopback addresses stand in for the node's, a service's and
// a pod prefix.
func TestDropUnlessFilter(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	lab.Run(t, "ip", "-6", "addr", "add", "fd00::2/128", "dev", "lo", "nodad")
	for _, tc := range []struct {
		name, network, listen string
		allowed               []netip.Prefix
		fromItself            bool
		from                  string
		want                  bool
	}{
		{"IPv4, an allowed host", "udp4", "127.0.0.1:0", []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, false, "127.0.0.2", true},
		{"IPv4, inside an allowed prefix", "udp4", "127.0.0.1:0", []netip.Prefix{netip.MustParsePrefix("127.0.8.0/22")}, false, "127.0.9.7", true},
		{"IPv4, outside", "udp4", "127.0.0.1:0", []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32"), netip.MustParsePrefix("127.0.8.0/22")}, false, "127.0.0.3", false},
		{"IPv4, nothing allowed", "udp4", "127.0.0.1:0", nil, false, "127.0.0.2", false},
		{"IPv4, an IPv6 prefix does not count", "udp4", "127.0.0.1:0", []netip.Prefix{netip.MustParsePrefix("::/0")}, false, "127.0.0.2", false},
		{"IPv4, from its own address", "udp4", "127.0.0.5:0", nil, true, "127.0.0.5", true},
		{"IPv4, its own address differs in the last bit", "udp4", "127.0.0.5:0", nil, true, "127.0.0.4", false},
		{"IPv6, the allowed host", "udp6", "[::1]:0", []netip.Prefix{netip.MustParsePrefix("fd00::2/128")}, false, "fd00::2", true},
		{"IPv6, outside", "udp6", "[::1]:0", []netip.Prefix{netip.MustParsePrefix("fd00:1::/64")}, false, "fd00::2", false},
		{"IPv6, from its own address", "udp6", "[fd00::2]:0", []netip.Prefix{netip.MustParsePrefix("fd00:1::/64")}, true, "fd00::2", true},
		{"IPv6, its own address differs in the first word", "udp6", "[::1]:0", nil, true, "fd00::2", false},
		{"IPv4, from its own address, not let through (an internal class)", "udp4", "127.0.0.5:0", nil, false, "127.0.0.5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.ListenPacket(tc.network, tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			raw, err := c.(*net.UDPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			fam := ipfamily.Of(netip.MustParseAddrPort(c.LocalAddr().String()).Addr())
			if err := setDropUnless(raw, true, fam, tc.allowed, tc.fromItself); err != nil {
				t.Fatalf("setDropUnless: %v", err)
			}
			from := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(tc.from), 0))
			s, err := net.DialUDP(tc.network, from, c.LocalAddr().(*net.UDPAddr))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			// One that must come may take long on a busy machine; one that
			// must not is waited for briefly (a late one could only hide
			// a failure, never make one).
			wait := 300 * time.Millisecond
			if tc.want {
				wait = 10 * time.Second
			}
			_ = c.SetReadDeadline(time.Now().Add(wait))
			_, _, err = c.ReadFrom(make([]byte, 8))
			if got := err == nil; got != tc.want {
				t.Errorf("datagram from %s received: %t (%v), want %t", tc.from, got, err, tc.want)
			}
		})
	}
}
