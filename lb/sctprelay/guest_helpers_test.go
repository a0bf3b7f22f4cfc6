package sctprelay

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"kproxy.dev/kproxy/lb/lbmetrics"
)

// Helpers of the guest tests (guest_test.go): real SCTP associations on the
// guest kernel's loopback.

// guestWait bounds every wait for an event the kernel should deliver at
// once: generous, since the guest's syscalls are slow and its kernel may
// wait for a busy host's CPU.
const guestWait = 30 * time.Second

// digestBackend is an SCTP server that answers each request line with
// "<name> <length> <sha256>\n", so a client knows which backend served it
// and that the request arrived intact. It reports each association's end.
type digestBackend struct {
	name string
	ln   *Listener
	// ended receives, per association, the error its read loop ended with
	// (nil: a clean EOF, the peer's SHUTDOWN).
	ended chan error
	// closeAfterReply makes the backend close each association after its
	// first reply, so the test sees the backend end the association.
	closeAfterReply bool
}

func startDigestBackend(t *testing.T, addr netip.AddrPort, name string, closeAfterReply bool) *digestBackend {
	t.Helper()
	ln, err := Listen(addr)
	if err != nil {
		t.Fatalf("backend %s: %v", name, err)
	}
	b := &digestBackend{name: name, ln: ln, ended: make(chan error, 16), closeAfterReply: closeAfterReply}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				// Said here, a failed Accept is not mistaken later for a
				// reply that never came.
				if !errors.Is(err, os.ErrClosed) {
					t.Errorf("backend %s stopped accepting: %v", name, err)
				}
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); b.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return b
}

func (b *digestBackend) serve(c *Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" {
				err = nil
			}
			b.ended <- err
			return
		}
		if _, err := fmt.Fprintf(c, "%s %d %x\n", b.name, len(line), sha256.Sum256([]byte(line))); err != nil {
			b.ended <- fmt.Errorf("backend %s reply: %w", b.name, err)
			return
		}
		if b.closeAfterReply {
			b.ended <- nil
			return
		}
	}
}

// waitEnded waits for the backend to see an association end.
func (b *digestBackend) waitEnded(t *testing.T) error {
	t.Helper()
	select {
	case err := <-b.ended:
		return err
	case <-time.After(guestWait):
		t.Fatalf("backend %s: the association did not end within %v", b.name, guestWait)
		return nil
	}
}

// rotatingPicker offers its endpoints round-robin, like the balancer does
// for a service without affinity.
type rotatingPicker struct {
	mu   sync.Mutex
	eps  []netip.AddrPort
	next int
}

func (p *rotatingPicker) Pick(netip.Addr) []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.eps)
	out := make([]netip.AddrPort, 0, n)
	for i := range n {
		out = append(out, p.eps[(p.next+i)%n])
	}
	p.next = (p.next + 1) % n
	return out
}
func (p *rotatingPicker) Connected(netip.Addr, netip.AddrPort) {}
func (p *rotatingPicker) Failed(netip.Addr, netip.AddrPort)    {}

// guestRelay is a running relay and its metrics.
type guestRelay struct {
	*Relay
	metrics *lbmetrics.Protocol
}

func startGuestRelay(t *testing.T, addr netip.AddrPort, backends ...*digestBackend) *guestRelay {
	t.Helper()
	ln, err := Listen(addr)
	if err != nil {
		t.Fatalf("relay listener: %v", err)
	}
	picker := &rotatingPicker{}
	for _, b := range backends {
		picker.eps = append(picker.eps, b.ln.Addr())
	}
	return serveGuestRelay(t, Config{Listener: ln, Picker: picker, Name: "guest/sctp", DialTimeout: guestWait})
}

// serveGuestRelay starts a relay of cfg, with metrics of its own, and stops
// it when the test ends.
func serveGuestRelay(t *testing.T, cfg Config) *guestRelay {
	t.Helper()
	m, err := lbmetrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("relay Serve: %v", err)
			}
		case <-time.After(guestWait):
			t.Errorf("the relay did not stop within %v of its context ending", guestWait)
		}
	})
	return &guestRelay{Relay: r, metrics: m.For(lbmetrics.ProtocolSCTP)}
}

// waitActive waits until the relay holds want associations, and says how
// many it holds when that does not happen.
func (r *guestRelay) waitActive(want float64) error {
	deadline := time.Now().Add(guestWait)
	for {
		got := testutil.ToFloat64(r.metrics.ConnectionsActive)
		if got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the relay still holds %v associations %v later, want %v", got, guestWait, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exchange sends one request line on c in messages of at most msgSize
// bytes, reads the backend's reply, checks it describes the request and
// returns the backend's name.
func exchange(t *testing.T, c *Conn, r *bufio.Reader, request string, msgSize int) (backend string) {
	t.Helper()
	if err := writeMessages(c, request, msgSize); err != nil {
		t.Fatalf("client write: %v", err)
	}
	_ = c.file.SetReadDeadline(time.Now().Add(guestWait))
	defer func() { _ = c.file.SetReadDeadline(time.Time{}) }()
	reply, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("client read of the reply: %v (got %q)", err, reply)
	}
	var name, digest string
	var n int
	if _, err := fmt.Sscanf(reply, "%s %d %s\n", &name, &n, &digest); err != nil {
		t.Fatalf("reply %q: %v", reply, err)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256([]byte(request))); n != len(request) || digest != want {
		t.Fatalf("backend %s saw %d bytes with digest %s; sent %d bytes with digest %s", name, n, digest, len(request), want)
	}
	return name
}

// defaultMessageSize keeps each write one SCTP message inside the default
// send buffer (16 KiB): a one-to-one socket still sends each write as one
// message, and one larger than the send buffer fails with EMSGSIZE instead
// of being split.
const defaultMessageSize = 16 << 10

func writeMessages(c *Conn, data string, msgSize int) error {
	for len(data) > 0 {
		n := min(len(data), msgSize)
		if _, err := io.WriteString(c, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// requestLine is a request of about n bytes ending in the one newline.
func requestLine(n int, seed string) string {
	return strings.Repeat(seed, n/len(seed)+1)[:n] + "\n"
}

// readEOF waits for a clean end of stream on c.
func readEOF(c *Conn) error {
	_ = c.file.SetReadDeadline(time.Now().Add(guestWait))
	var buf [64]byte
	n, err := c.Read(buf[:])
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("no end of stream within %v", guestWait)
	case err != nil:
		return err
	}
	return fmt.Errorf("read %q where the end of stream was due", buf[:n])
}
