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
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/lbmetrics"
)

// copyModes are the two ways a direction moves bytes: read/write through a
// buffer, and splice(2) through a pipe (after the first read here).
var copyModes = []struct {
	name        string
	spliceAfter int64
}{
	{"read-write", -1},
	{"splice", 1},
}

// stream is size deterministic pseudo-random bytes.
func stream(seed byte, size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{seed}), size)
}

func digest(r io.Reader) ([]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return h.Sum(nil), n, err
}

// settled polls v until it stops changing for a while and returns it.
func settled(v *atomic.Int64) int64 {
	last := v.Load()
	for stable := 0; stable < 6; {
		time.Sleep(50 * time.Millisecond)
		if now := v.Load(); now != last {
			last, stable = now, 0
		} else {
			stable++
		}
	}
	return last
}

// countingWriter counts what a backend managed to write.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// TestSlowReader: a client that stops reading holds the backend back
// (the relay stops reading from it while bytes wait for the client), and
// what waited arrives intact, end of stream included, once it reads again.
func TestSlowReader(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	// What the kernel buffers is not held back by the relay: the socket the
	// relay stops reading from still takes up to tcp_rmem's maximum (32 MiB
	// by default on Linux 6.18, where autotuning reached 40 MB in all under
	// load), the backend's and the relay's send buffers up to tcp_wmem's.
	// With 4 MiB each, what the relay holds back shows well below size/2.
	for _, sysctl := range []string{"tcp_rmem", "tcp_wmem"} {
		if err := os.WriteFile("/proc/sys/net/ipv4/"+sysctl, []byte("4096 131072 4194304"), 0o644); err != nil {
			t.Fatalf("bounding the namespace's TCP buffers: %v", err)
		}
	}
	const size = 64 << 20
	for _, mode := range copyModes {
		for _, closeAfter := range []bool{false, true} {
			name := mode.name
			if closeAfter {
				name += ", backend closes while bytes wait"
			}
			t.Run(name, func(t *testing.T) {
				var written atomic.Int64
				backend := serve(t, func(c *net.TCPConn) {
					_, _ = io.Copy(countingWriter{c, &written}, stream(7, size))
					if !closeAfter {
						// Hold the connection open until the client is done.
						_, _ = io.Copy(io.Discard, c)
					}
				})
				tp := startProxy(t, Config{Picker: newPicker(backend), SpliceAfter: mode.spliceAfter})
				svc := vip()
				portal(t, svc, tp.port)
				c := dial(t, svc)
				_ = c.SetReadBuffer(64 << 10)

				held := settled(&written)
				if held >= size/2 {
					t.Fatalf("backend wrote %d of %d bytes to a client that reads nothing; want it held back", held, size)
				}
				want, _, _ := digest(stream(7, size))
				var r io.Reader = c
				if !closeAfter {
					r = io.LimitReader(c, size)
				}
				got, n, err := digest(r)
				if err != nil || n != size || !bytes.Equal(got, want) {
					t.Fatalf("client read %d bytes (%v), digest match %v; want %d intact bytes", n, err, bytes.Equal(got, want), size)
				}
				// The end of stream came after the bytes when the backend
				// closed (io.Copy saw EOF, not a reset, or it would have
				// failed above). The connection ends once the client's FIN
				// follows; only then is the byte count final, as the relay
				// counts a chunk once its write returns, which may be after
				// the client has read it.
				if err := c.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				eventually(t, "the connection to end", func() bool { return tp.ActiveConnections() == 0 })
				if got := counter(tp, "bytes", lbmetrics.DirectionToClient); got != size {
					t.Errorf("bytes_total{to_client} = %v, want %d", got, size)
				}
			})
		}
	}
}

// TestResetWhileBytesWait: when the client resets while the relay holds
// bytes for it, the backend is reset too.
func TestResetWhileBytesWait(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	for _, mode := range copyModes {
		t.Run(mode.name, func(t *testing.T) {
			var written atomic.Int64
			backendErr := make(chan error, 1)
			backend := serve(t, func(c *net.TCPConn) {
				_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // failure bound only
				_, err := io.Copy(countingWriter{c, &written}, stream(3, 1<<30))
				backendErr <- err
			})
			tp := startProxy(t, Config{Picker: newPicker(backend), SpliceAfter: mode.spliceAfter})
			svc := vip()
			portal(t, svc, tp.port)
			c := dial(t, svc)
			if _, err := io.ReadFull(c, make([]byte, 1<<20)); err != nil {
				t.Fatal(err)
			}
			settled(&written) // the relay now holds bytes it cannot write
			_ = c.SetLinger(0)
			c.Close()
			if err := <-backendErr; !isReset(err) && !errors.Is(err, syscall.EPIPE) {
				t.Errorf("backend write after the client reset = %v; want ECONNRESET or EPIPE", err)
			}
			eventually(t, "the connection to be released", func() bool { return tp.ActiveConnections() == 0 })
		})
	}
}

// TestResetAfterHalfClose: a client that half-closed and then resets has
// its reset passed to the backend, although nothing was left to read from
// the client and nothing waited to be written to it.
func TestResetAfterHalfClose(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	sawEOF, clientGone := make(chan struct{}), make(chan struct{})
	backendErr := make(chan error, 1)
	backend := serve(t, func(c *net.TCPConn) {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // failure bound only
		if _, err := io.Copy(io.Discard, c); err != nil {
			backendErr <- err
			return
		}
		close(sawEOF)
		<-clientGone
		// A read would return the EOF already seen, reset or not: the
		// socket's pending error tells.
		backendErr <- pendingError(c, 10*time.Second)
	})
	tp := startProxy(t, Config{Picker: newPicker(backend)})
	svc := vip()
	portal(t, svc, tp.port)
	c := dial(t, svc)
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	<-sawEOF
	_ = c.SetLinger(0)
	c.Close()
	close(clientGone)
	// The backend had read the FIN (CLOSE_WAIT), where Linux reports a
	// reset as EPIPE.
	if err := <-backendErr; !errors.Is(err, syscall.EPIPE) {
		t.Errorf("backend socket error after the client reset = %v; want EPIPE (a reset in CLOSE_WAIT)", err)
	}
	eventually(t, "the connection to be released", func() bool { return tp.ActiveConnections() == 0 })
}

// pendingError polls c's pending socket error (SO_ERROR) for up to d.
func pendingError(c *net.TCPConn, d time.Duration) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var soErr error
		if err := rc.Control(func(fd uintptr) { soErr = eventloop.SocketError(int(fd)) }); err != nil {
			return err
		}
		if soErr != nil {
			return soErr
		}
	}
	return errors.New("no socket error")
}

// TestStreamShapes moves bulk and small messages on one connection in the
// orders that make a direction switch to splice and back, and checks every
// byte and the byte counters.
func TestStreamShapes(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	bulk := func(seed byte) []byte {
		b, _ := io.ReadAll(stream(seed, 4<<20))
		return b
	}
	small := func(seed byte) []byte { return bytes.Repeat([]byte{seed}, 100) }
	for _, tc := range []struct {
		name     string
		messages [][]byte
	}{
		{"bulk, then small messages", [][]byte{bulk(1), small(2), small(3), small(4)}},
		{"small messages, then bulk", [][]byte{small(1), small(2), bulk(3), bulk(4)}},
		{"alternating", [][]byte{small(1), bulk(2), small(3), bulk(4), small(5)}},
	} {
		for _, spliceAfter := range []int64{0, 1, -1} {
			t.Run(fmt.Sprintf("%s, SpliceAfter %d", tc.name, spliceAfter), func(t *testing.T) {
				tp := startProxy(t, Config{Picker: newPicker(serve(t, echo)), SpliceAfter: spliceAfter})
				svc := vip()
				portal(t, svc, tp.port)
				c := dial(t, svc)
				var total int
				for i, m := range tc.messages {
					writeErr := make(chan error, 1)
					go func() { _, err := c.Write(m); writeErr <- err }()
					got := make([]byte, len(m))
					if _, err := io.ReadFull(c, got); err != nil {
						t.Fatalf("message %d: reading the echo: %v", i, err)
					}
					if err := <-writeErr; err != nil {
						t.Fatalf("message %d: %v", i, err)
					}
					if !bytes.Equal(got, m) {
						t.Fatalf("message %d (%d bytes) came back altered", i, len(m))
					}
					total += len(m)
				}
				c.Close()
				eventually(t, "the connection to end", func() bool { return tp.ActiveConnections() == 0 })
				for _, dir := range []string{lbmetrics.DirectionToEndpoint, lbmetrics.DirectionToClient} {
					if got := counter(tp, "bytes", dir); got != float64(total) {
						t.Errorf("bytes_total{%s} = %v, want %d", dir, got, total)
					}
				}
			})
		}
	}
}

// TestManyConnections runs many concurrent connections through few loops.
func TestManyConnections(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	const conns, rounds = 300, 20
	for _, loops := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d loops", loops), func(t *testing.T) {
			tp := startProxy(t, Config{Picker: newPicker(serve(t, echo)), Loops: loops})
			svc := vip()
			portal(t, svc, tp.port)
			clients := make([]*net.TCPConn, conns)
			for i := range clients {
				clients[i] = dial(t, svc)
			}
			var wg sync.WaitGroup
			errs := make(chan error, conns)
			for i, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					msg := []byte(fmt.Sprintf("client %d says hello", i))
					got := make([]byte, len(msg))
					for range rounds {
						if _, err := c.Write(msg); err != nil {
							errs <- err
							return
						}
						if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
							errs <- fmt.Errorf("client %d: echo %q, %v", i, got, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if got := tp.ActiveConnections(); got != conns {
				t.Errorf("ActiveConnections = %d, want %d", got, conns)
			}
			// Loops are added as connections come, up to Loops.
			if got := len(tp.loops()); got != loops {
				t.Errorf("%d loops running, want %d", got, loops)
			}
			for _, c := range clients {
				c.Close()
			}
			eventually(t, "every connection to end", func() bool { return tp.ActiveConnections() == 0 })
		})
	}
}

// blackhole makes connects to addr go unanswered (SYNs dropped) until the
// test ends.
func blackhole(t *testing.T, addr netip.Addr) {
	t.Helper()
	rule := []string{"OUTPUT", "-d", addr.String() + "/32", "-p", "tcp", "-j", "DROP"}
	lab.Run(t, "iptables", append([]string{"-w", "-A"}, rule...)...)
	t.Cleanup(func() { lab.Run(t, "iptables", append([]string{"-w", "-D"}, rule...)...) })
}

// TestDialTimeout: an endpoint that never answers is given up after
// DialTimeout and the next one is tried; CloseAll resets a client whose
// connect is still in progress, and the loops then exit.
func TestDialTimeout(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	silent := netip.AddrPortFrom(netip.MustParseAddr("198.19.99.1"), 80)
	lab.Run(t, "ip", "route", "replace", "198.19.99.0/24", "dev", "lo")
	blackhole(t, silent.Addr())

	t.Run("fails over after the timeout", func(t *testing.T) {
		live := serve(t, echo)
		picker := newPicker(silent, live)
		tp := startProxy(t, Config{Picker: picker, DialTimeout: 200 * time.Millisecond})
		svc := vip()
		portal(t, svc, tp.port)
		start := time.Now()
		c := dial(t, svc)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("no echo after the timed-out endpoint: %v", err)
		}
		if waited := time.Since(start); waited < 200*time.Millisecond {
			t.Errorf("answered after %v, before the dial timeout", waited)
		}
		if _, failed := picker.reports(); len(failed) != 1 || failed[0] != silent {
			t.Errorf("Failed reports = %v, want [%v]", failed, silent)
		}
		if got := counter(tp, "dial_failures"); got != 1 {
			t.Errorf("dial_failures_total = %v, want 1", got)
		}
	})

	t.Run("CloseAll during a connect", func(t *testing.T) {
		tp := startProxy(t, Config{Picker: newPicker(silent), DialTimeout: time.Minute})
		svc := vip()
		portal(t, svc, tp.port)
		c := dial(t, svc)
		time.Sleep(100 * time.Millisecond) // the relay is connecting now
		if err := tp.CloseAll(); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); !isReset(err) {
			t.Errorf("client read after CloseAll = %d, %v; want ECONNRESET", n, err)
		}
		if !tp.loopsExited(10 * time.Second) {
			t.Error("event loops still running after CloseAll")
		}
		if got := counter(tp, "dial_failures"); got != 0 {
			t.Errorf("dial_failures_total = %v, want 0 (the relay was torn down, the endpoint did not fail)", got)
		}
	})
}

// loopsExited waits up to d for every event loop of the Proxy to return.
func (p *Proxy) loopsExited(d time.Duration) bool {
	done := make(chan struct{})
	go func() { p.running.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestLoopsExitAfterClose: once closed, loops stay while connections remain
// and exit when the last one ends.
func TestLoopsExitAfterClose(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	tp := startProxy(t, Config{Picker: newPicker(serve(t, echo)), Loops: 2})
	svc := vip()
	portal(t, svc, tp.port)
	c := dial(t, svc)
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if got := len(tp.loops()); got != 1 {
		t.Errorf("%d loops running for one connection, want 1 (more start only under load)", got)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	if tp.loopsExited(200 * time.Millisecond) {
		t.Fatal("loops exited while a connection was open")
	}
	c.Close()
	if !tp.loopsExited(10 * time.Second) {
		t.Error("loops still running after the last connection ended")
	}
}

func TestDialQueue(t *testing.T) {
	a, b, c := &conn{}, &conn{}, &conn{}
	order := func(q *connQueue) []*conn {
		var out []*conn
		for x := q.head; x != nil; x = x.dnext {
			out = append(out, x)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		remove []*conn
		want   []*conn
	}{
		{"none removed", nil, []*conn{a, b, c}},
		{"head", []*conn{a}, []*conn{b, c}},
		{"middle", []*conn{b}, []*conn{a, c}},
		{"tail", []*conn{c}, []*conn{a, b}},
		{"twice, and one not queued", []*conn{b, b, &conn{}}, []*conn{a, c}},
		{"all", []*conn{c, a, b}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q connQueue
			for _, x := range []*conn{a, b, c} {
				*x = conn{}
				q.push(x)
			}
			for _, x := range tc.remove {
				q.remove(x)
			}
			got := order(&q)
			if len(got) != len(tc.want) {
				t.Fatalf("queue holds %d, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("position %d holds the wrong connection", i)
				}
			}
			if (q.tail == nil) != (len(tc.want) == 0) || (q.tail != nil && q.tail != tc.want[len(tc.want)-1]) {
				t.Error("tail does not point at the last connection")
			}
		})
	}
}

// TestSaturatedLoopHandsOver: connections share one loop until it falls
// behind (a direction cut off by the turn's budget, a queue of connections
// to accept); then it moves half of them to a new loop, and the moved
// connections carry on mid-stream with their bytes intact, in either copy
// mode. A loop that keeps up keeps its connections.
func TestSaturatedLoopHandsOver(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	for _, tc := range []struct {
		name        string
		spliceAfter int64
		size        int64 // per connection, echoed back
		burst       int   // connections opened at once while the streams run
		wantLoops   int
	}{
		{"bulk, read-write", -1, 32 << 20, 0, 2},
		{"bulk, splice, and a burst of connections", 1, 32 << 20, 64, 2},
		{"small messages", -1, 100, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := startProxy(t, Config{Picker: newPicker(serve(t, echo)), Loops: 2, SpliceAfter: tc.spliceAfter,
				saturatedTurns: 8, saturatedFor: time.Nanosecond})
			svc := vip()
			portal(t, svc, tp.port)
			const conns = 6
			var wg sync.WaitGroup
			errs := make(chan error, conns)
			clients := make([]*net.TCPConn, conns)
			for i := range clients {
				clients[i] = dial(t, svc)
			}
			var echoed atomic.Int64
			for i, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					writeErr := make(chan error, 1)
					go func() { _, err := io.Copy(c, stream(byte(i), tc.size)); writeErr <- err }()
					got, n, err := digest(io.TeeReader(io.LimitReader(c, tc.size), counterWriter{&echoed}))
					want, _, _ := digest(stream(byte(i), tc.size))
					if werr := <-writeErr; err == nil {
						err = werr
					}
					if err != nil || n != tc.size || !bytes.Equal(got, want) {
						errs <- fmt.Errorf("connection %d: %d of %d bytes echoed, intact %v, err %v", i, n, tc.size, bytes.Equal(got, want), err)
					}
				}()
			}
			if tc.burst > 0 {
				eventually(t, "the streams to be under way", func() bool { return echoed.Load() > 1<<20 })
				for range tc.burst {
					clients = append(clients, dial(t, svc))
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			eventually(t, "every connection to be relayed", func() bool { return tp.ActiveConnections() == len(clients) })
			loops := tp.loops()
			if len(loops) != tc.wantLoops {
				t.Errorf("%d loops running, want %d", len(loops), tc.wantLoops)
			}
			for i, l := range loops {
				if n := l.load.Load(); n == 0 {
					t.Errorf("loop %d has no connections", i)
				}
			}
			for _, c := range clients {
				c.Close()
			}
			eventually(t, "every connection to end", func() bool { return tp.ActiveConnections() == 0 })
		})
	}
}

// counterWriter counts bytes written through it.
type counterWriter struct{ n *atomic.Int64 }

func (w counterWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return len(b), nil
}
