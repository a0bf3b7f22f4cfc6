package tcprelay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/lbmetrics"
)

func counter(tp *testProxy, vec string, labels ...string) float64 {
	switch vec {
	case "rejected":
		return testutil.ToFloat64(tp.metrics.RejectedTotal.WithLabelValues(append([]string{lbmetrics.ProtocolTCP}, labels...)...))
	case "dial_failures":
		return testutil.ToFloat64(tp.metrics.DialFailuresTotal.WithLabelValues(lbmetrics.ProtocolTCP))
	case "connections":
		return testutil.ToFloat64(tp.metrics.ConnectionsTotal.WithLabelValues(lbmetrics.ProtocolTCP))
	case "active":
		return testutil.ToFloat64(tp.metrics.ConnectionsActive.WithLabelValues(lbmetrics.ProtocolTCP))
	case "bytes":
		return testutil.ToFloat64(tp.metrics.BytesTotal.WithLabelValues(lbmetrics.ProtocolTCP, labels[0]))
	case "accept_errors":
		return testutil.ToFloat64(tp.metrics.AcceptErrorsTotal.WithLabelValues(lbmetrics.ProtocolTCP))
	}
	panic("unknown metric " + vec)
}

// TestRelay runs every relay behaviour through a real iptables REDIRECT
// portal in a fresh network namespace, once with the loops accepting from a
// *net.TCPListener themselves and once with any other listener, served by an
// Accept goroutine that hands connections over.
func TestRelay(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	for _, mode := range []struct {
		name  string
		start func(testing.TB, Config) *testProxy
	}{
		{"loops accept", startProxy},
		{"Accept goroutine", startProxyBehindWrapper},
	} {
		t.Run(mode.name, func(t *testing.T) { testRelay(t, mode.start) })
	}
}

func testRelay(t *testing.T, startProxy func(testing.TB, Config) *testProxy) {
	t.Run("round trip through a portal", func(t *testing.T) {
		backend := serve(t, echo)
		tp := startProxy(t, Config{Picker: newPicker(backend)})
		svc := vip()
		portal(t, svc, tp.port)

		c := dial(t, svc)
		msg := []byte("hello through the portal")
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("reading echo: %v", err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("echo = %q, want %q", got, msg)
		}
		c.Close()
		eventually(t, "the connection to be accounted closed", func() bool { return counter(tp, "active") == 0 })
		if got := counter(tp, "connections"); got != 1 {
			t.Errorf("connections_total = %v, want 1", got)
		}
		for _, dir := range []string{lbmetrics.DirectionToEndpoint, lbmetrics.DirectionToClient} {
			if got := counter(tp, "bytes", dir); got != float64(len(msg)) {
				t.Errorf("bytes_total{%s} = %v, want %d", dir, got, len(msg))
			}
		}
	})

	t.Run("fail-over past dead endpoints", func(t *testing.T) {
		dead1, dead2 := deadEndpoint(t), deadEndpoint(t)
		live := serve(t, echo)
		picker := newPicker(dead1, dead2, live)
		tp := startProxy(t, Config{Picker: picker})
		svc := vip()
		portal(t, svc, tp.port)

		c := dial(t, svc)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("no echo after fail-over: %v", err)
		}
		connected, failed := picker.reports()
		if diff := cmp.Diff([]netip.AddrPort{live}, connected, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
			t.Errorf("Connected reports (-want +got):\n%s", diff)
		}
		if len(failed) != 2 || failed[0] != dead1 || failed[1] != dead2 {
			t.Errorf("Failed reports = %v, want [%v %v]", failed, dead1, dead2)
		}
		if got := counter(tp, "dial_failures"); got != 2 {
			t.Errorf("dial_failures_total = %v, want 2", got)
		}
	})

	// Clients the proxy must refuse see a reset, not a hang.
	refusals := []struct {
		name   string
		picker func(t *testing.T) *fakePicker
		cfg    Config
		reason string
	}{
		{name: "no endpoints", picker: func(*testing.T) *fakePicker { return newPicker() }, reason: lbmetrics.ReasonNoEndpoints},
		{name: "every endpoint dead", picker: func(t *testing.T) *fakePicker {
			return newPicker(deadEndpoint(t), deadEndpoint(t))
		}, reason: lbmetrics.ReasonDialFailed},
		{name: "attempts bounded", picker: func(t *testing.T) *fakePicker {
			// The live endpoint is third; only two attempts are allowed.
			return newPicker(deadEndpoint(t), deadEndpoint(t), serve(t, echo))
		}, cfg: Config{MaxAttempts: 2}, reason: lbmetrics.ReasonDialFailed},
		{name: "not one of the proxy's portals", picker: func(t *testing.T) *fakePicker {
			return newPicker(serve(t, echo))
		}, cfg: Config{IsPortalDestination: func(netip.AddrPort) bool { return false }}, reason: lbmetrics.ReasonDirect},
	}
	for _, tc := range refusals {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			picker := tc.picker(t)
			cfg := tc.cfg
			cfg.Picker = picker
			tp := startProxy(t, cfg)
			svc := vip()
			portal(t, svc, tp.port)

			expectRefused(t, svc)
			if got := counter(tp, "rejected", tc.reason); got != 1 {
				t.Errorf("rejected_total{%s} = %v, want 1", tc.reason, got)
			}
			if got := counter(tp, "connections"); got != 0 {
				t.Errorf("connections_total = %v, want 0", got)
			}
		})
	}

	t.Run("direct connection to the proxy port refused", func(t *testing.T) {
		tp := startProxy(t, Config{Picker: newPicker(serve(t, echo))})
		svc := vip()
		portal(t, svc, tp.port) // conntrack is active, the connection just does not use the portal
		for _, addr := range []string{"127.0.0.1", "198.18.0.99"} {
			expectRefused(t, netip.AddrPortFrom(netip.MustParseAddr(addr), tp.port))
		}
		if got := counter(tp, "rejected", lbmetrics.ReasonDirect); got != 2 {
			t.Errorf("rejected_total{direct} = %v, want 2", got)
		}
	})

	t.Run("half-close: response still flows after the client's FIN", func(t *testing.T) {
		backend := serve(t, func(c *net.TCPConn) {
			req, err := io.ReadAll(c) // until the client's FIN
			if err != nil {
				return
			}
			fmt.Fprintf(c, "received %d bytes: %s", len(req), req)
		})
		tp := startProxy(t, Config{Picker: newPicker(backend)})
		svc := vip()
		portal(t, svc, tp.port)

		c := dial(t, svc)
		if _, err := c.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		resp, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("reading response after half-close: %v", err)
		}
		if want := "received 7 bytes: request"; string(resp) != want {
			t.Errorf("response = %q, want %q", resp, want)
		}
	})

	t.Run("backend reset reaches the client", func(t *testing.T) {
		backend := serve(t, func(c *net.TCPConn) {
			_, _ = io.ReadFull(c, make([]byte, 4))
			_ = c.SetLinger(0)
		}) // serve closes c: with linger 0 that is a reset
		tp := startProxy(t, Config{Picker: newPicker(backend)})
		svc := vip()
		portal(t, svc, tp.port)

		c := dial(t, svc)
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); !isReset(err) {
			t.Errorf("client read = %d, %v; want ECONNRESET", n, err)
		}
	})

	t.Run("client reset reaches the backend", func(t *testing.T) {
		backendErr := make(chan error, 1)
		backend := serve(t, func(c *net.TCPConn) {
			_, _ = io.ReadFull(c, make([]byte, 4))
			_, _ = c.Write([]byte("pong"))
			_, err := c.Read(make([]byte, 1))
			backendErr <- err
		})
		tp := startProxy(t, Config{Picker: newPicker(backend)})
		svc := vip()
		portal(t, svc, tp.port)

		c := dial(t, svc)
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetLinger(0)
		c.Close()
		if err := <-backendErr; !isReset(err) {
			t.Errorf("backend read after client reset = %v; want ECONNRESET", err)
		}
	})

	for _, mode := range []struct {
		name        string
		spliceAfter int64
	}{{"hybrid", 0}, {"read-write only", -1}, {"splice from the start", 1}} {
		t.Run("64 MiB both ways intact, "+mode.name, func(t *testing.T) {
			tp := startProxy(t, Config{Picker: newPicker(serve(t, echo)), SpliceAfter: mode.spliceAfter})
			svc := vip()
			portal(t, svc, tp.port)

			const size = 64 << 20
			c := dial(t, svc)
			sent := sha256.New()
			writeErr := make(chan error, 1)
			go func() {
				src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{1}), size), sent)
				_, err := io.Copy(c, src)
				if err == nil {
					err = c.CloseWrite()
				}
				writeErr <- err
			}()
			received := sha256.New()
			n, err := io.Copy(received, c)
			if err != nil {
				t.Fatalf("reading echo after %d bytes: %v", n, err)
			}
			if err := <-writeErr; err != nil {
				t.Fatalf("writing: %v", err)
			}
			if n != size {
				t.Fatalf("received %d bytes, want %d", n, size)
			}
			if !bytes.Equal(sent.Sum(nil), received.Sum(nil)) {
				t.Fatal("checksum of the echoed stream differs from what was sent")
			}
			for _, dir := range []string{lbmetrics.DirectionToEndpoint, lbmetrics.DirectionToClient} {
				if got := counter(tp, "bytes", dir); got != size {
					t.Errorf("bytes_total{%s} = %v, want %d", dir, got, size)
				}
			}
		})
	}

	t.Run("Close keeps established connections, CloseAll resets them", func(t *testing.T) {
		tp := startProxy(t, Config{Picker: newPicker(serve(t, echo))})
		svc := vip()
		portal(t, svc, tp.port)
		c := dial(t, svc)
		roundTrip := func() error {
			if _, err := c.Write([]byte("a")); err != nil {
				return err
			}
			_, err := io.ReadFull(c, make([]byte, 1))
			return err
		}
		if err := roundTrip(); err != nil {
			t.Fatal(err)
		}
		if err := tp.Close(); err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(); err != nil {
			t.Fatalf("established connection broken by Close: %v", err)
		}
		if c2, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(svc)); err == nil {
			c2.Close()
			t.Error("new connection accepted after Close")
		}
		if got := tp.ActiveConnections(); got != 1 {
			t.Errorf("ActiveConnections = %d, want 1", got)
		}
		if err := tp.CloseAll(); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); !isReset(err) {
			t.Errorf("read after CloseAll = %d, %v; want ECONNRESET", n, err)
		}
		eventually(t, "no active connections", func() bool { return tp.ActiveConnections() == 0 && counter(tp, "active") == 0 })
	})

	t.Run("SetPicker steers new connections", func(t *testing.T) {
		first := serve(t, func(c *net.TCPConn) { c.Write([]byte("1")) })
		second := serve(t, func(c *net.TCPConn) { c.Write([]byte("2")) })
		tp := startProxy(t, Config{Picker: newPicker(first)})
		svc := vip()
		portal(t, svc, tp.port)
		for _, want := range []string{"1", "2"} {
			got, err := io.ReadAll(dial(t, svc))
			if err != nil || string(got) != want {
				t.Errorf("backend answered %q, %v; want %q", got, err, want)
			}
			tp.SetPicker(newPicker(second))
		}
	})
}

// TestRejectWithoutConntrackEntry: in a namespace with no NAT rules,
// conntrack keeps no entry, SO_ORIGINAL_DST fails and the client is refused.
func TestRejectWithoutConntrackEntry(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	tp := startProxy(t, Config{Picker: newPicker(serve(t, echo))})
	expectRefused(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tp.port))
	if got := counter(tp, "rejected", lbmetrics.ReasonDirect); got != 1 {
		t.Errorf("rejected_total{direct} = %v, want 1", got)
	}
}

// emfileListener fails its first failures Accepts with EMFILE, as accept(2)
// does when the process is out of descriptors.
type emfileListener struct {
	net.Listener
	failures int
	calls    int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.calls++; l.calls <= l.failures {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func TestAcceptBacksOffOnFDExhaustion(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4zero})
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxyOn(t, &emfileListener{Listener: ln, failures: 4}, Config{Picker: newPicker(serve(t, echo))})
	svc := vip()
	portal(t, svc, tp.port)

	c := dial(t, svc)
	if _, err := c.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("connection not served after EMFILE back-off: %v", err)
	}
	if got := counter(tp, "accept_errors"); got != 4 {
		t.Errorf("accept_errors_total = %v, want 4", got)
	}
}

func TestBackoffSchedule(t *testing.T) {
	var got []string
	d := time.Duration(0)
	for range 10 {
		d = nextBackoff(d)
		got = append(got, d.String())
	}
	want := []string{"5ms", "10ms", "20ms", "40ms", "80ms", "160ms", "320ms", "640ms", "1s", "1s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoff schedule (-want +got):\n%s", diff)
	}
	if !isFDExhaustion(&net.OpError{Err: os.NewSyscallError("accept4", syscall.ENFILE)}) || isFDExhaustion(errors.New("EMFILE")) {
		t.Error("isFDExhaustion misclassifies errors")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for name, cfg := range map[string]Config{
		"no listener":           {},
		"negative timeout":      {Listener: ln, DialTimeout: -1},
		"negative max attempts": {Listener: ln, MaxAttempts: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
}

func TestRaiseNoFileLimit(t *testing.T) {
	lim, err := RaiseNoFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	if lim.NewSoft != lim.Hard || lim.NewSoft < lim.OldSoft {
		t.Errorf("limit after raising = %+v; want soft == hard", lim)
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	if now.Cur != lim.NewSoft {
		t.Errorf("RLIMIT_NOFILE soft = %d, reported %d", now.Cur, lim.NewSoft)
	}
}
