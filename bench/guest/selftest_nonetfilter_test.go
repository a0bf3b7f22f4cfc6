package guest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
)

// The self-test of the guest without netfilter (guest-exec
// -netfilter=false): what a node whose kernel lacks netfilter offers.

func TestGuestWithoutNetfilter(t *testing.T) {
	guest.SkipUnlessWithoutNetfilter(t)
	if mods, err := guest.LoadedNetfilterModules(); err != nil || len(mods) > 0 {
		t.Errorf("netfilter modules loaded: %v, %v", mods, err)
	}
	if v, err := os.ReadFile("/proc/sys/kernel/modules_disabled"); err != nil || strings.TrimSpace(string(v)) != "1" {
		t.Errorf("kernel.modules_disabled = %q, %v; want 1", v, err)
	}
	if out, err := exec.Command("modprobe", "xt_comment").CombinedOutput(); err == nil {
		t.Errorf("modprobe xt_comment worked:\n%s", out)
	}
	for _, f := range []string{"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names", "/proc/net/nf_conntrack", "/proc/net/ip_vs"} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v; want it absent", f, err)
		}
	}
	ran := 0
	for _, tool := range []string{"iptables", "iptables-legacy", "iptables-nft", "ip6tables", "ip6tables-legacy", "ip6tables-nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		ran++
		if out, err := exec.Command(tool, "-t", "nat", "-S").CombinedOutput(); err == nil {
			t.Errorf("%s -t nat -S works:\n%s", tool, out)
		}
	}
	if ran == 0 {
		t.Error("no iptables tool is installed to try the nat table with")
	}
	// Tried after the tools: none of them may have loaded a module.
	if mods, err := guest.LoadedNetfilterModules(); err != nil || len(mods) > 0 {
		t.Errorf("netfilter modules loaded after the iptables tools ran: %v, %v", mods, err)
	}
}

// TestGuestWithoutNetfilterKproxyDetection: kproxy's feature detection sees
// a kernel with no iptables backend, conntrack, IPVS, ipset or dummy links,
// and with SCTP.
func TestGuestWithoutNetfilterKproxyDetection(t *testing.T) {
	guest.SkipUnlessWithoutNetfilter(t)
	f := kernel.Detect(context.Background())
	if f.Backend != "" {
		t.Errorf("iptables backend %q (%s), want none", f.Backend, f.BackendReason)
	}
	for name, want := range map[string]struct {
		s       kernel.Support
		present bool
	}{
		"conntrack": {f.Conntrack, false}, "IPVS": {f.IPVS, false}, "ipset": {f.IPSet, false},
		"dummy links": {f.DummyLinks, false}, "SCTP": {f.SCTP, true},
	} {
		if want.s.Present != want.present {
			t.Errorf("%s: present %v (%s), want %v", name, want.s.Present, want.s, want.present)
		}
	}
	if t.Failed() {
		t.Logf("detected features:\n%s", f)
	}
}

// TestGuestLocalRoutes: what local portals rest on, with or without
// netfilter: a `local` route in the local table makes a service address the
// node's own, and a listener on it takes connections from the node itself.
// IPv4 binds to such an address like to any local one; IPv6 binds only to
// interface addresses, so the listener needs IPV6_FREEBIND.
func TestGuestLocalRoutes(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	if lab.InFreshNetns(t) {
		return
	}
	for _, tc := range []struct {
		name     string
		route    []string
		network  string
		addr     string
		freebind bool
	}{
		{"IPv4", []string{"route", "add", "local", "198.18.0.1/32", "dev", "lo", "table", "local"}, "tcp4", "198.18.0.1", false},
		{"IPv6", []string{"-6", "route", "add", "local", "fd00::1/128", "dev", "lo", "table", "local"}, "tcp6", "fd00::1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab.Run(t, "ip", tc.route...)
			hostPort := net.JoinHostPort(tc.addr, "0")
			if tc.freebind {
				// Recorded, not required: whether the route alone would do.
				if ln, err := net.Listen(tc.network, hostPort); err == nil {
					t.Logf("a plain bind to %s works after the route", tc.addr)
					ln.Close()
				} else {
					t.Logf("a plain bind to %s after the route: %v", tc.addr, err)
				}
			}
			lc := net.ListenConfig{}
			if tc.freebind {
				lc.Control = func(_, _ string, c syscall.RawConn) error {
					var serr error
					if err := c.Control(func(fd uintptr) {
						serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1)
					}); err != nil {
						return err
					}
					return serr
				}
			}
			ln, err := lc.Listen(context.Background(), tc.network, hostPort)
			if err != nil {
				t.Fatalf("listening on %s (freebind %v): %v", hostPort, tc.freebind, err)
			}
			defer ln.Close()
			accepted := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err == nil {
					_, err = io.Copy(c, c)
					c.Close()
				}
				accepted <- err
			}()
			c, err := net.DialTimeout(tc.network, ln.Addr().String(), 10*time.Second)
			if err != nil {
				t.Fatalf("connecting to %s from the node: %v", ln.Addr(), err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if err != nil || string(got) != "ping" {
				t.Errorf("echo from %s: %q, %v; want \"ping\"", ln.Addr(), got, err)
			}
			if err := <-accepted; err != nil {
				t.Errorf("the listener on %s: %v", ln.Addr(), err)
			}
		})
	}
}
