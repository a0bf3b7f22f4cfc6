package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Questions the cases ask the data plane, and the checks on the answers.

// randomTries bounds how many requests a randomly balancing mode gets to
// reach all three backends: uniform picks miss one in 30 tries about once in
// 60,000 runs.
const randomTries = 30

// changeBound is how soon a Service or EndpointSlice change must show in the
// data path: kproxy runs with no minimum sync interval, so a change that
// waited for the periodic sync (30 s) fails; what it takes is printed by
// benchmarks, not bounded here (2 s was overrun in the guest kernel with
// the host's cores busy).
const changeBound = 10 * time.Second

// askHTTP asks nginx behind url, from d, which backend answers.
func askHTTP(d lab.Dialer, url string) func() (string, error) {
	return func() (string, error) {
		status, body, err := lab.HTTPGetStatus(d, url)
		if err == nil && status != 200 {
			err = fmt.Errorf("GET %s: status %d (%q)", url, status, body)
		}
		return body, err
	}
}

// askUDP asks the prefixing UDP echo server behind addr, from d, which
// backend answers, checking the datagram came back whole. An ask may reuse
// the source port of an earlier one and so join its flow while the flow
// lives: counts of new flows ask with askUDPNewFlows.
func askUDP(d lab.Dialer, addr string) func() (string, error) {
	return echoBackend(addr, func(msg string) (string, error) { return lab.UDPAsk(d, addr, msg) })
}

// askUDPNewFlows is askUDP with every ask a new flow: each keeps its source
// port until t ends (lab.UDPAskHeld), so no later ask joins its flow and
// takes its endpoint out of turn.
func (l *e2eLab) askUDPNewFlows(t *testing.T, d lab.Dialer, addr string) func() (string, error) {
	return echoBackend(addr, func(msg string) (string, error) {
		answer, sends, err := lab.UDPAskHeldCounted(t, d, addr, msg)
		if sends > 1 {
			l.udpResends.Add(1)
		}
		return answer, err
	})
}

// echoBackend asks the prefixing UDP echo server behind addr with ask and
// returns the backend name its answer starts with.
func echoBackend(addr string, ask func(msg string) (string, error)) func() (string, error) {
	return func() (string, error) {
		const msg = "ping"
		got, err := ask(msg)
		if err != nil {
			return "", err
		}
		name, echoed, _ := strings.Cut(got, " ")
		if echoed != msg {
			return "", fmt.Errorf("UDP %s answered %q, want \"<backend> %s\"", addr, got, msg)
		}
		return name, nil
	}
}

// wantBalanced checks that new connections from ask spread over all three
// backends, and that nothing else answers: in equal turns for a round-robin
// mode, within randomTries for a random one. Over UDP every ask must be a
// new flow (askUDPNewFlows).
func (l *e2eLab) wantBalanced(t *testing.T, what string, ask func() (string, error)) {
	t.Helper()
	if l.mode.exactRoundRobin {
		// The order of the answers tells a turn taken twice in a row (two
		// asks in one flow) from a skipped one (a pick made elsewhere). A
		// UDP ask that sent its datagram again may have taken a turn
		// unseen (the copy arriving after the first one's flow idled out):
		// a window with such an ask that is off by that is asked again.
		const windows = 3
		for w := 1; ; w++ {
			resends := l.udpResends.Load()
			var order []string
			seen := lab.Spread(t, 9, func() (string, error) {
				got, err := ask()
				order = append(order, got)
				return got, err
			})
			l.wantBackends(t, what, seen, 3)
			exact := true
			for _, n := range seen {
				exact = exact && n == 3
			}
			if exact {
				return
			}
			if resent := l.udpResends.Load() - resends; resent > 0 && w < windows {
				t.Logf("%s: in order %v, after %d asks sent again; asking again", what, order, resent)
				continue
			}
			t.Errorf("%s: answers %v, want 3 of 9 each (round-robin), in order %v", what, seen, order)
			return
		}
	}
	seen := map[string]int{}
	for i := 0; i < randomTries && len(seen) < 3; i++ {
		got, err := ask()
		if err != nil {
			t.Fatalf("%s: request %d failed: %v (answers so far %v)", what, i+1, err, seen)
		}
		seen[got]++
	}
	l.wantBackends(t, what, seen, 3)
}

// wantBackends fails unless seen holds exactly n distinct answers, all of
// them backend names.
func (l *e2eLab) wantBackends(t *testing.T, what string, seen map[string]int, n int) {
	t.Helper()
	for answer := range seen {
		if !l.isBackend(answer) {
			t.Fatalf("%s: unexpected answer %q among %v", what, answer, seen)
		}
	}
	if len(seen) != n {
		t.Fatalf("%s reached %d distinct backends, want %d: %v", what, len(seen), n, seen)
	}
}

// spreadMinAsks is how many requests spreadOver always makes, so that a
// backend that should be out of the rotation has its chances to answer.
const spreadMinAsks = 12

// spreadOver asks spreadMinAsks times, and on up to randomTries while fewer
// than distinct answers came back: a random pick between two backends misses
// one in 12 tries once in 2,048 calls, which a suite asking dozens of times a
// run turns into a flake; in 30 tries once in 500 million. A failed request
// is returned, not fatal.
func spreadOver(distinct int, ask func() (string, error)) (map[string]int, error) {
	seen := map[string]int{}
	for i := 0; i < randomTries && (i < spreadMinAsks || len(seen) < distinct); i++ {
		got, err := ask()
		if err != nil {
			return seen, err
		}
		seen[got]++
	}
	return seen, nil
}

// trySpread is lab.Spread for use inside lab.Within: a failed request is
// returned, not fatal.
func trySpread(n int, ask func() (string, error)) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		got, err := ask()
		if err != nil {
			return seen, err
		}
		seen[got]++
	}
	return seen, nil
}

// wantOnly fails unless every answer in seen came from backend.
func wantOnly(t *testing.T, what string, seen map[string]int, backend string) {
	t.Helper()
	if len(seen) != 1 || seen[backend] == 0 {
		t.Fatalf("%s: answers %v, want only %s", what, seen, backend)
	}
}

// wantRefused fails unless err says the request was refused or reset: a
// service with nothing to serve it must not answer, and must not leave the
// client waiting for a timeout either.
func wantRefused(t *testing.T, what string, answer string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s answered %q, want a refusal", what, answer)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the client timed out (%v) instead of being refused", what, err)
	}
	t.Logf("%s: refused: %v", what, err)
}

// dialRefused dials addr over TCP from d and fails unless the connection is
// refused (a reset or an ICMP port unreachable answering the SYN).
func dialRefused(t *testing.T, d lab.Dialer, what, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		t.Fatalf("%s: connecting to %s succeeded, want it refused", what, addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s: connecting to %s failed with %v, want connection refused", what, addr, err)
	}
}

// wantReset fails unless a TCP client on d is reset by addr, at connect or
// at its first read, without an answer.
func wantReset(t *testing.T, d lab.Dialer, what, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		var n int
		n, err = conn.Read(make([]byte, 512))
		if n > 0 {
			t.Fatalf("%s: %s answered", what, addr)
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s: %s: %v, want a reset", what, addr, err)
	}
}

// wantDropped fails unless a TCP connection attempt from d to addr goes
// unanswered, as behind kube-proxy's DROP: the client keeps retrying.
func wantDropped(t *testing.T, d lab.Dialer, what, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		t.Fatalf("%s: connecting to %s succeeded, want it dropped", what, addr)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: connecting to %s failed with %v, want no answer (dropped)", what, addr, err)
	}
}

// wantNotServed fails if a TCP client on d gets an answer from addr, or is
// accepted and then left hanging. A refused or an unanswered connection
// attempt passes: kube-proxy drops (rather than rejects) new connections a
// traffic policy or source range keeps out, so the client retries as it would
// while a pod starts. What must not happen is a connection that is accepted
// and then neither answered nor closed.
func wantNotServed(t *testing.T, d lab.Dialer, what, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Logf("%s: the connection was not established: %v", what, err)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		t.Logf("%s: the connection was closed at once: %v", what, err)
		return
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if n > 0 {
		t.Fatalf("%s: %s answered %q", what, addr, buf[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection to %s was accepted and then left hanging", what, addr)
	}
	t.Logf("%s: the connection was closed without an answer: %v", what, err)
}

// digest sends payload to addr from h over TCP, half-closes, and returns the
// answering backend after checking the TCP digest server counted and hashed
// exactly payload.
func digest(h *lab.Host, addr, payload string) (string, error) {
	conn, err := h.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(conn, payload); err != nil {
		return "", err
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	reply, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	backend, n, sum, err := lab.ParseTCPDigestReply(string(reply))
	if err != nil {
		return "", err
	}
	if want := sha256.Sum256([]byte(payload)); n != int64(len(payload)) || sum != hex.EncodeToString(want[:]) {
		return "", fmt.Errorf("%s received %d bytes with sha256 %s; sent %d bytes with sha256 %x", backend, n, sum, len(payload), want)
	}
	return backend, nil
}
