package guest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
	f := kernel.Detect(context.Background(), false)
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
// node's own, and a listener on it takes TCP, UDP and SCTP from the node
// itself. IPv4 binds to such an address like to any local one; IPv6 binds
// only to interface addresses, so the listener needs IPV6_FREEBIND. SCTP
// picks its source among interface addresses in scope, so the node needs
// one besides loopback's (else connect fails with ENETUNREACH).
func TestGuestLocalRoutes(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	if lab.InFreshNetns(t) {
		return
	}
	lab.Run(t, "ip", "link", "add", "node0", "type", "veth", "peer", "name", "node1")
	lab.Run(t, "ip", "addr", "add", "198.19.0.1/24", "dev", "node0")
	lab.Run(t, "ip", "-6", "addr", "add", "fd00:1::1/64", "dev", "node0", "nodad")
	lab.Run(t, "ip", "link", "set", "node0", "up")
	lab.Run(t, "ip", "link", "set", "node1", "up")
	lab.Run(t, "ip", "route", "add", "local", "198.18.0.1/32", "dev", "lo", "table", "local")
	lab.Run(t, "ip", "-6", "route", "add", "local", "fd00::1/128", "dev", "lo", "table", "local")
	vip4 := &unix.SockaddrInet4{Addr: [4]byte{198, 18, 0, 1}}
	vip6 := &unix.SockaddrInet6{Addr: [16]byte{0: 0xfd, 15: 1}}
	for _, tc := range []struct {
		name   string
		vip    unix.Sockaddr
		sotype int
		proto  int
	}{
		{"TCP over IPv4", vip4, unix.SOCK_STREAM, unix.IPPROTO_TCP},
		{"UDP over IPv4", vip4, unix.SOCK_DGRAM, unix.IPPROTO_UDP},
		{"SCTP over IPv4", vip4, unix.SOCK_STREAM, unix.IPPROTO_SCTP},
		{"TCP over IPv6", vip6, unix.SOCK_STREAM, unix.IPPROTO_TCP},
		{"UDP over IPv6", vip6, unix.SOCK_DGRAM, unix.IPPROTO_UDP},
		{"SCTP over IPv6", vip6, unix.SOCK_STREAM, unix.IPPROTO_SCTP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			family := unix.AF_INET
			if _, ok := tc.vip.(*unix.SockaddrInet6); ok {
				family = unix.AF_INET6
				// Recorded, not required: whether the route alone would do.
				plain := socketFor(t, family, tc.sotype, tc.proto)
				t.Logf("a plain bind to fd00::1 after the route: %v", unix.Bind(plain, tc.vip))
			}
			ln := socketFor(t, family, tc.sotype, tc.proto)
			if family == unix.AF_INET6 {
				if err := unix.SetsockoptInt(ln, unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := unix.Bind(ln, tc.vip); err != nil {
				t.Fatalf("binding the service address: %v", err)
			}
			bound, err := unix.Getsockname(ln)
			if err != nil {
				t.Fatal(err)
			}
			c := socketFor(t, family, tc.sotype, tc.proto)
			server := ln
			if tc.sotype == unix.SOCK_DGRAM {
				if err := unix.Sendto(c, []byte("ping"), 0, bound); err != nil {
					t.Fatalf("sending to the service address: %v", err)
				}
			} else {
				if err := unix.Listen(ln, 1); err != nil {
					t.Fatal(err)
				}
				if err := unix.Connect(c, bound); err != nil {
					t.Fatalf("connecting to the service address from the node: %v", err)
				}
				if server, _, err = unix.Accept(ln); err != nil {
					t.Fatalf("accepting: %v", err)
				}
				defer unix.Close(server)
				if _, err := unix.Write(c, []byte("ping")); err != nil {
					t.Fatal(err)
				}
			}
			buf := make([]byte, 16)
			n, from, err := unix.Recvfrom(server, buf, 0)
			if err != nil || string(buf[:n]) != "ping" {
				t.Errorf("the listener on the service address received %q, %v; want \"ping\"", buf[:n], err)
			}
			if from == nil {
				from, _ = unix.Getpeername(server)
			}
			t.Logf("received from %s", sockaddrString(from))
		})
	}
}

// socketFor opens a socket that the test closes and whose reads give up
// after a while, so a lost packet fails the test instead of hanging it.
func socketFor(t *testing.T, family, sotype, proto int) int {
	t.Helper()
	fd, err := unix.Socket(family, sotype|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Fatalf("socket(%d, %d, %d): %v", family, sotype, proto, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	tv := unix.NsecToTimeval((10 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return fd
}

func sockaddrString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	case *unix.SockaddrInet6:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	}
	return fmt.Sprint(sa)
}
