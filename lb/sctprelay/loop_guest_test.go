package sctprelay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/selfdial"
)

// loopNofile is the descriptor limit the loop tests run under: a relay
// that dials itself runs out of it within moments instead of the guest's
// far larger default, so a relay without the loop check fails the test
// rather than hang it.
const loopNofile = 256

// TestGuestRelayRefusesLoops: a service port whose endpoint leads back
// into kproxy (the relay's own address, or a second relay whose endpoint
// is the first) has the association coming back refused at once (reason
// loop): the client's association ends, no relay dials again, and nothing
// is left behind (associations, remembered dials, descriptors).
func TestGuestRelayRefusesLoops(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	lowerNofile(t, loopNofile)
	for _, tc := range []struct {
		name   string
		addr   netip.AddrPort
		relays int // each relay's endpoint is the next one's address
	}{
		{"IPv4/own listening address", guestFamilies[0].loopback, 1},
		{"IPv6/own listening address", guestFamilies[1].loopback, 1},
		{"IPv4/two relays pointing at each other", guestFamilies[0].loopback, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dials := selfdial.New()
			pickers := make([]*rotatingPicker, tc.relays)
			relays := make([]*guestRelay, tc.relays)
			for i := range relays {
				ln, err := Listen(tc.addr)
				if err != nil {
					t.Fatal(err)
				}
				pickers[i] = &rotatingPicker{}
				relays[i] = serveGuestRelay(t, Config{Listener: ln, Picker: pickers[i], DialTimeout: guestWait,
					Name: fmt.Sprintf("guest/loop-%d:sctp", i), Dials: dials})
			}
			for i := range relays {
				pickers[i].eps = []netip.AddrPort{relays[(i+1)%len(relays)].Addr()}
			}
			fdsBefore := openDescriptors(t)

			start := time.Now()
			err := requestFails(relays[0].Addr())
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the looping request failed %v after it started", took.Round(time.Millisecond))
			var loops, relayed, acceptErrors float64
			for _, r := range relays {
				loops += testutil.ToFloat64(r.metrics.RejectedLoop)
				relayed += testutil.ToFloat64(r.metrics.ConnectionsTotal)
				acceptErrors += testutil.ToFloat64(r.metrics.AcceptErrors)
			}
			// The relay the client reached dials once; the association
			// that comes back is refused rather than relayed again.
			if loops != 1 || relayed > 1 || acceptErrors != 0 {
				t.Errorf("refused as loops %v, relayed %v, accept errors %v; want 1 loop refused, at most 1 association relayed, "+
					"no accept errors (a relay that dials itself runs out of descriptors)", loops, relayed, acceptErrors)
			}
			for _, r := range relays {
				if err := r.waitActive(0); err != nil {
					t.Error(err)
				}
			}
			waitFor(t, "the relays to forget their dials", func() bool { return dials.Len() == 0 })
			waitFor(t, fmt.Sprintf("the descriptors to return to %d", fdsBefore),
				func() bool { return openDescriptors(t) <= fdsBefore })
		})
	}
}

// TestGuestRelayBoundsServicePort: one service port's associations are
// bounded, in all and while waiting for their endpoint's handshake; one
// past a bound is refused (reason service_port_full), and a place freed
// is taken again.
func TestGuestRelayBoundsServicePort(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	t.Run("associations", func(t *testing.T) {
		port, err := fdbudget.NewPort(fdbudget.PortLimits{Connections: 2, Dialing: 2})
		if err != nil {
			t.Fatal(err)
		}
		b := startDigestBackend(t, guestFamilies[0].loopback, "backend-1", false)
		ln, err := Listen(guestFamilies[0].loopback)
		if err != nil {
			t.Fatal(err)
		}
		relay := serveGuestRelay(t, Config{Listener: ln, Picker: &rotatingPicker{eps: []netip.AddrPort{b.ln.Addr()}},
			DialTimeout: guestWait, Name: "guest/bounded:sctp", Dials: selfdial.New(), Port: port})
		var held []*Conn
		for i := range 2 {
			c, err := Dial(relay.Addr(), guestWait)
			if err != nil {
				t.Fatalf("association %d: %v", i, err)
			}
			defer c.Close()
			exchange(t, c, bufio.NewReader(c), requestLine(40, "hello "), defaultMessageSize)
			held = append(held, c)
		}
		if err := requestFails(relay.Addr()); err != nil {
			t.Fatalf("a third association while two are relayed: %v", err)
		}
		if got := testutil.ToFloat64(relay.metrics.RejectedPortFull); got != 1 {
			t.Errorf("%v associations refused as service_port_full, want 1", got)
		}
		held[0].Close()
		waitFor(t, "the closed association's place to be freed", func() bool { n, _ := port.Held(); return n == 1 })
		c, err := Dial(relay.Addr(), guestWait)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		exchange(t, c, bufio.NewReader(c), requestLine(40, "again "), defaultMessageSize)
		c.Close()
		held[1].Close()
		waitFor(t, "every place to be freed", func() bool { n, d := port.Held(); return n == 0 && d == 0 })
	})
	t.Run("waiting for a handshake", func(t *testing.T) {
		// An endpoint behind a dummy interface never answers the INIT.
		out, err := exec.Command("sh", "-c", "ip link add kpsctp0 type dummy && ip addr add 198.19.7.1/24 dev kpsctp0 && ip link set kpsctp0 up").CombinedOutput()
		if err != nil {
			t.Fatalf("adding a dummy interface: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "kpsctp0").Run() })
		port, err := fdbudget.NewPort(fdbudget.PortLimits{Connections: 4, Dialing: 1})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := Listen(guestFamilies[0].loopback)
		if err != nil {
			t.Fatal(err)
		}
		// The handshake is given up after 5 s, within the time the relay
		// is given to stop when the test ends.
		relay := serveGuestRelay(t, Config{Listener: ln, Picker: &rotatingPicker{eps: []netip.AddrPort{netip.MustParseAddrPort("198.19.7.2:9")}},
			DialTimeout: 5 * time.Second, Name: "guest/unanswered:sctp", Port: port})
		waiting, err := Dial(relay.Addr(), guestWait)
		if err != nil {
			t.Fatal(err)
		}
		defer waiting.Close()
		waitFor(t, "the first association to wait for its endpoint", func() bool { _, d := port.Held(); return d == 1 })
		if err := requestFails(relay.Addr()); err != nil {
			t.Fatalf("a second association while one waits for its endpoint: %v", err)
		}
		if got := testutil.ToFloat64(relay.metrics.RejectedPortFull); got != 1 {
			t.Errorf("%v associations refused as service_port_full, want 1", got)
		}
		waitFor(t, "the unanswered handshake to be given up", func() bool { n, d := port.Held(); return n == 0 && d == 0 })
	})
}

// requestFails opens an association to addr, sends a request and checks
// that the association ends (an ABORT, or a SHUTDOWN with no reply) rather
// than being answered or left hanging.
func requestFails(addr netip.AddrPort) error {
	c, err := Dial(addr, guestWait)
	if err != nil {
		return nil // refused before the handshake completed: failed too
	}
	defer c.Close()
	return requestFailsOn(c)
}

// requestFailsOn is requestFails on an open association.
func requestFailsOn(c *Conn) error {
	// An ABORT that arrives before the request makes the write fail, and
	// the kernel then reports the aborted association to no later read.
	if _, err := io.WriteString(c, requestLine(40, "loop ")); err != nil {
		return nil
	}
	_ = c.file.SetReadDeadline(time.Now().Add(guestWait))
	var buf [256]byte
	n, err := c.Read(buf[:])
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("the association neither failed nor was answered within %v", guestWait)
	case err == nil:
		return fmt.Errorf("answered %q, want the association to fail", buf[:n])
	}
	return nil
}

// lowerNofile lowers the process's soft RLIMIT_NOFILE for the test.
func lowerNofile(t *testing.T, limit uint64) {
	t.Helper()
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &was); err != nil {
		t.Fatal(err)
	}
	lowered := was
	lowered.Cur = min(limit, was.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &was) })
}

func openDescriptors(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// waitFor polls cond until it holds, failing the test after guestWait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guestWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", guestWait, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGuestRequestFailsSeesAnEarlyAbort: requestFails sees an association
// the relay aborted before the request was written. The kernel reports an
// aborted association's ECONNRESET to one call only; when that is the
// write, a read after it waits for ever.
func TestGuestRequestFailsSeesAnEarlyAbort(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	ln, err := Listen(guestFamilies[0].loopback)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Dial(ln.Addr(), guestWait)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	refused, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	refused.Abort()
	// Wait for the ABORT to arrive without taking its error: poll sees it.
	waitFor(t, "the client's association to be aborted", func() bool {
		var revents int16
		_ = c.raw.Control(func(fd uintptr) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, err := unix.Poll(pfd, 0); err == nil && n == 1 {
				revents = pfd[0].Revents
			}
		})
		return revents&unix.POLLERR != 0
	})
	if err := requestFailsOn(c); err != nil {
		t.Fatal(err)
	}
}
