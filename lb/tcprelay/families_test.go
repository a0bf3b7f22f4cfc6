package tcprelay

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// serveAt is serve on a listener of network at addr.
func serveAt(t testing.TB, network, addr string, handler func(*net.TCPConn)) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handler(c.(*net.TCPConn))
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// portalFor installs the OUTPUT REDIRECT portal for vip in the table of its
// family until the test ends.
func portalFor(t testing.TB, vip netip.AddrPort, proxyPort uint16) {
	t.Helper()
	cmd, prefix := "iptables", "/32"
	if vip.Addr().Is6() {
		cmd, prefix = "ip6tables", "/128"
	}
	rule := []string{"OUTPUT", "-d", vip.Addr().String() + prefix, "-p", "tcp", "--dport", fmt.Sprint(vip.Port()),
		"-j", "REDIRECT", "--to-ports", fmt.Sprint(proxyPort)}
	lab.Run(t, cmd, append([]string{"-w", "-t", "nat", "-A"}, rule...)...)
	t.Cleanup(func() { lab.Run(t, cmd, append([]string{"-w", "-t", "nat", "-D"}, rule...)...) })
}

// TestAddressFamilies relays IPv4 and IPv6 clients, including an IPv4
// client of a dual-stack listener (its addresses arrive IPv4-mapped) and
// endpoints of the other family.
func TestAddressFamilies(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	lab.Run(t, "ip", "-6", "route", "replace", "local", "fd00:18::/64", "dev", "lo")
	v4Backend := serveAt(t, "tcp4", "127.0.0.1:0", echo)
	v6Backend := serveAt(t, "tcp6", "[::1]:0", echo)
	for i, tc := range []struct {
		name            string
		network, listen string
		vip             netip.Addr
		backend         netip.AddrPort
		portalsChecked  bool
	}{
		{"IPv4", "tcp4", "0.0.0.0:0", netip.MustParseAddr("198.18.0.20"), v4Backend, true},
		{"IPv6", "tcp6", "[::]:0", netip.MustParseAddr("fd00:18::20"), v6Backend, true},
		{"IPv4 client, dual-stack listener", "tcp", "[::]:0", netip.MustParseAddr("198.18.0.21"), v4Backend, true},
		{"IPv6 client, IPv4 endpoint", "tcp6", "[::]:0", netip.MustParseAddr("fd00:18::21"), v4Backend, false},
		{"IPv4 client, IPv6 endpoint", "tcp4", "0.0.0.0:0", netip.MustParseAddr("198.18.0.22"), v6Backend, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen(tc.network, tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			svc := netip.AddrPortFrom(tc.vip, uint16(9000+i))
			var seen []netip.AddrPort
			var mu sync.Mutex
			tp := startProxyOn(t, ln, Config{Picker: newPicker(tc.backend), IsPortalDestination: func(d netip.AddrPort) bool {
				mu.Lock()
				seen = append(seen, d)
				mu.Unlock()
				return d == svc
			}})
			portalFor(t, svc, tp.port)
			c := dial(t, svc)
			msg := []byte("hello " + tc.name)
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
				t.Fatalf("echo %q, %v; want %q", got, err, msg)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.portalsChecked && (len(seen) != 1 || seen[0] != svc) {
				t.Errorf("original destinations checked = %v, want [%v]", seen, svc)
			}
		})
	}
}

// TestLoopAcceptBacksOffOnEMFILE: out of descriptors, the loops stop
// accepting for a back-off, count the error, and serve the waiting client
// once descriptors are free again.
func TestLoopAcceptBacksOffOnEMFILE(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	tp := startProxy(t, Config{Picker: newPicker(serve(t, echo)), Loops: 1})
	svc := vip()
	portal(t, svc, tp.port)
	// The loops start in Serve's goroutine; taking their descriptors while
	// the limit is low would leave none for the client.
	eventually(t, "the relay's loops to start", func() bool { return tp.nloops.Load() >= 1 })

	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Room for the client's socket and nothing else: the relay's accept
	// then fails with EMFILE.
	limit, err := limitLeavingOneDescriptor()
	if err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(svc))
	if err != nil {
		restore()
		t.Fatalf("dialling with the descriptor limit lowered: %v", err)
	}
	defer c.Close()
	eventually(t, "an accept error", func() bool { return counter(tp, "accept_errors") >= 1 })
	restore()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // failure bound only
	if _, err := c.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("connection not served after the back-off: %v", err)
	}
}

// limitLeavingOneDescriptor returns the RLIMIT_NOFILE under which exactly
// one descriptor number is free (the limit bounds numbers, not counts): the
// second lowest free number. Listing /proc/self/fd takes the lowest free
// number, free again afterwards; the lowest number missing from the list is
// the second.
func limitLeavingOneDescriptor() (uint64, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	open := map[int]bool{}
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			open[n] = true
		}
	}
	n := 0
	for open[n] {
		n++
	}
	return uint64(n), nil
}
