package tcprelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/lbmetrics"
)

// testVIPs is routed to loopback in the test namespace, as a service VIP is
// reachable on a node.
const testVIPs = "198.18.0.0/16"

// fakePicker returns a fixed endpoint order and records the reports.
type fakePicker struct {
	mu        sync.Mutex
	endpoints []netip.AddrPort
	connected []netip.AddrPort
	failed    []netip.AddrPort
}

func newPicker(eps ...netip.AddrPort) *fakePicker { return &fakePicker{endpoints: eps} }

func (f *fakePicker) Pick(netip.Addr) []netip.AddrPort {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]netip.AddrPort(nil), f.endpoints...)
}

func (f *fakePicker) Connected(_ netip.Addr, ep netip.AddrPort) {
	f.mu.Lock()
	f.connected = append(f.connected, ep)
	f.mu.Unlock()
}

func (f *fakePicker) Failed(_ netip.Addr, ep netip.AddrPort) {
	f.mu.Lock()
	f.failed = append(f.failed, ep)
	f.mu.Unlock()
}

func (f *fakePicker) reports() (connected, failed []netip.AddrPort) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]netip.AddrPort(nil), f.connected...), append([]netip.AddrPort(nil), f.failed...)
}

// setupNamespace routes the test VIPs to loopback. Call it once per
// namespace, inside lab.InFreshNetns.
func setupNamespace(t testing.TB) {
	t.Helper()
	lab.Run(t, "ip", "route", "replace", "local", testVIPs, "dev", "lo")
}

// portal installs the REDIRECT rule a userspace-mode portal uses for
// traffic from the node itself, steering vip to proxyPort, removed at the
// end of the test.
func portal(t testing.TB, vip netip.AddrPort, proxyPort uint16) {
	t.Helper()
	rule := []string{"OUTPUT", "-d", vip.Addr().String() + "/32", "-p", "tcp", "--dport", fmt.Sprint(vip.Port()),
		"-j", "REDIRECT", "--to-ports", fmt.Sprint(proxyPort)}
	lab.Run(t, "iptables", append([]string{"-w", "-t", "nat", "-A"}, rule...)...)
	t.Cleanup(func() {
		lab.Run(t, "iptables", append([]string{"-w", "-t", "nat", "-D"}, rule...)...)
	})
}

type testProxy struct {
	*Proxy
	port    uint16
	metrics *lbmetrics.Metrics
	reg     *prometheus.Registry
}

// startProxy runs a Proxy on a kernel-chosen port until the test ends.
func startProxy(t testing.TB, cfg Config) *testProxy {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4zero})
	if err != nil {
		t.Fatal(err)
	}
	return startProxyOn(t, ln, cfg)
}

// wrappedListener hides the *net.TCPListener inside, as any other
// net.Listener would: the Proxy serves it with an Accept goroutine.
type wrappedListener struct{ net.Listener }

// startProxyBehindWrapper is startProxy with the listener wrapped.
func startProxyBehindWrapper(t testing.TB, cfg Config) *testProxy {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4zero})
	if err != nil {
		t.Fatal(err)
	}
	return startProxyOn(t, wrappedListener{ln}, cfg)
}

// startProxyOn runs a Proxy on ln until the test ends. It counts into
// cfg.Metrics when set (a test whose routes count into them too), else into
// metrics of its own.
func startProxyOn(t testing.TB, ln net.Listener, cfg Config) *testProxy {
	t.Helper()
	var reg *prometheus.Registry
	if cfg.Metrics == nil {
		reg = prometheus.NewRegistry()
		m, err := lbmetrics.New(reg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Metrics = m
	}
	cfg.Listener = ln
	if cfg.Name == "" {
		cfg.Name = t.Name()
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(context.Background()) }()
	t.Cleanup(func() {
		if err := p.CloseAll(); err != nil {
			t.Errorf("CloseAll: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testProxy{Proxy: p, port: uint16(ln.Addr().(*net.TCPAddr).Port), metrics: cfg.Metrics, reg: reg}
}

// serve runs handler for every connection to a new loopback listener until
// the test ends and returns its address.
func serve(t testing.TB, handler func(*net.TCPConn)) netip.AddrPort {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if isFDExhaustion(err) {
				// accept(2) takes a descriptor before it looks for a
				// connection: a test that lowers the limit fails it even
				// with none waiting.
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handler(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func echo(c *net.TCPConn) { _, _ = io.Copy(c, c) }

// deadEndpoint returns a loopback address with nothing listening.
func deadEndpoint(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ap := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	return ap
}

var nextVIPPort atomic.Uint32

// vip returns a fresh service address for one test case.
func vip() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("198.18.0.10"), uint16(8000+nextVIPPort.Add(1)))
}

func dial(t testing.TB, ap netip.AddrPort) *net.TCPConn {
	t.Helper()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(ap))
	if err != nil {
		t.Fatalf("dialling %s: %v", ap, err)
	}
	t.Cleanup(func() { c.Close() })
	// A failure bound, not a timing assertion: a hung relay fails the test
	// instead of the whole run.
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// eventually polls cond until it holds or a generous bound passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// isReset reports whether err is the peer's reset as a reader sees it.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// expectRefused dials ap and requires a reset, which on loopback may
// already fail the connect or else the first read.
func expectRefused(t testing.TB, ap netip.AddrPort) {
	t.Helper()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(ap))
	if err != nil {
		if !isReset(err) {
			t.Errorf("dialling %s: %v; want ECONNRESET", ap, err)
		}
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // failure bound only
	if n, err := c.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("reading from %s = %d, %v; want ECONNRESET", ap, n, err)
	}
}
