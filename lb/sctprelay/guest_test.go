package sctprelay

import (
	"bufio"
	"errors"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/guest"
)

// The tests in this file need SCTP sockets, which the host kernel lacks;
// they run in the guest kernel (make test-guest) and skip elsewhere.

var guestFamilies = []struct {
	name     string
	loopback netip.AddrPort
}{
	{"IPv4", netip.MustParseAddrPort("127.0.0.1:0")},
	{"IPv6", netip.MustParseAddrPort("[::1]:0")},
}

// TestGuestRelayRoundTripsToBothBackends: associations through the relay
// alternate between the two backends, and every request (a small one and
// one far larger than the relay's copy buffer) arrives intact and is
// answered on the same association.
func TestGuestRelayRoundTripsToBothBackends(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	for _, fam := range guestFamilies {
		t.Run(fam.name, func(t *testing.T) {
			b1 := startDigestBackend(t, fam.loopback, "backend-1", false)
			b2 := startDigestBackend(t, fam.loopback, "backend-2", false)
			relay := startGuestRelay(t, fam.loopback, b1, b2)

			var served []string
			for i := range 4 {
				c, err := Dial(relay.Addr(), guestWait)
				if err != nil {
					t.Fatalf("association %d: dialling the relay: %v", i, err)
				}
				r := bufio.NewReader(c)
				first := exchange(t, c, r, requestLine(40, "hello "), defaultMessageSize)
				second := exchange(t, c, r, requestLine(300_000, "0123456789abcdef"), defaultMessageSize)
				if first != second {
					t.Errorf("association %d: answered by %s, then by %s", i, first, second)
				}
				served = append(served, first)
				c.Close()
			}
			want := []string{"backend-1", "backend-2", "backend-1", "backend-2"}
			if len(served) != len(want) {
				t.Fatalf("served by %v, want %v", served, want)
			}
			for i := range want {
				if served[i] != want[i] {
					t.Fatalf("served by %v, want %v (round-robin over both backends)", served, want)
				}
			}
		})
	}
}

// TestGuestRelayPropagatesClose: when one side ends its association, the
// other side learns it (SCTP has no half-close: a SHUTDOWN ends the
// association both ways), and the relay lets go of the pair.
func TestGuestRelayPropagatesClose(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	for _, fam := range guestFamilies {
		t.Run(fam.name+"/client closes", func(t *testing.T) {
			b := startDigestBackend(t, fam.loopback, "backend-1", false)
			relay := startGuestRelay(t, fam.loopback, b)
			c, err := Dial(relay.Addr(), guestWait)
			if err != nil {
				t.Fatalf("dialling the relay: %v", err)
			}
			exchange(t, c, bufio.NewReader(c), requestLine(100, "ping "), defaultMessageSize)
			c.Close()
			if err := b.waitEnded(t); err != nil {
				t.Fatalf("the backend's association ended with %v, want a clean SHUTDOWN", err)
			}
			if err := relay.waitActive(0); err != nil {
				t.Error(err)
			}
		})
		t.Run(fam.name+"/backend closes", func(t *testing.T) {
			b := startDigestBackend(t, fam.loopback, "backend-1", true)
			relay := startGuestRelay(t, fam.loopback, b)
			c, err := Dial(relay.Addr(), guestWait)
			if err != nil {
				t.Fatalf("dialling the relay: %v", err)
			}
			defer c.Close()
			exchange(t, c, bufio.NewReader(c), requestLine(100, "ping "), defaultMessageSize)
			if err := readEOF(c); err != nil {
				t.Fatalf("the client after the backend closed: %v", err)
			}
			c.Close()
			if err := relay.waitActive(0); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestGuestRelayCarriesLargeMessages: a client whose send buffer allows
// messages larger than the relay's copy buffer (32 KiB) and the kernel's
// default SCTP send buffer (16 KiB) gets them to the backend intact.
func TestGuestRelayCarriesLargeMessages(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	fam := guestFamilies[0]
	b := startDigestBackend(t, fam.loopback, "backend-1", false)
	relay := startGuestRelay(t, fam.loopback, b)
	c, err := Dial(relay.Addr(), guestWait)
	if err != nil {
		t.Fatalf("dialling the relay: %v", err)
	}
	defer c.Close()
	var serr error
	if err := c.raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20) }); err != nil || serr != nil {
		t.Fatalf("SO_SNDBUF: %v %v", err, serr)
	}
	// One 48 KiB message: more than the relay reads at once.
	exchange(t, c, bufio.NewReader(c), requestLine(48<<10, "large message "), 48<<10)
}

// TestGuestListenerAcceptAfterClose: Accept on a closed listener returns an
// error wrapping os.ErrClosed, as documented; Serve relies on it to stop.
func TestGuestListenerAcceptAfterClose(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	for _, tc := range []struct {
		name        string
		closeBefore bool
	}{
		{"closed before Accept", true},
		{"closed while Accept waits", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := Listen(guestFamilies[0].loopback)
			if err != nil {
				t.Fatal(err)
			}
			if tc.closeBefore {
				ln.Close()
			} else {
				time.AfterFunc(50*time.Millisecond, func() { ln.Close() })
			}
			_, err = ln.Accept()
			if !errors.Is(err, os.ErrClosed) {
				t.Errorf("Accept after Close = %v (%T), want an error wrapping os.ErrClosed", err, err)
			}
		})
	}
}

// TestGuestListenerAcceptSurvivesSignals: a signal that reaches the
// accepting thread while nothing is queued (the Go runtime preempts with
// SIGURG) does not make Accept fail. The kernel's non-blocking SCTP accept
// sleeps until the next timer tick on an empty queue and returns EINTR when
// a signal arrives meanwhile; a backend or relay that took that for a
// failure stopped accepting, and the association it then never accepted hung.
func TestGuestListenerAcceptSurvivesSignals(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	ln, err := Listen(guestFamilies[0].loopback)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const associations = 200
	accepting := make(chan int)  // the accepting thread's id, then once per Accept call
	accepted := make(chan error) // the result of each Accept
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		accepting <- unix.Gettid()
		for range associations {
			accepting <- 0
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			c.Close()
			accepted <- nil
		}
	}()
	tid := <-accepting
	stop := make(chan struct{})
	signalled := make(chan struct{})
	go func() {
		defer close(signalled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = unix.Tgkill(unix.Getpid(), tid, unix.SIGURG)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	defer func() { close(stop); <-signalled }()
	for i := range associations {
		<-accepting
		c, err := Dial(ln.Addr(), guestWait)
		if err != nil {
			t.Fatalf("association %d: %v", i, err)
		}
		err = <-accepted
		c.Close()
		if err != nil {
			t.Fatalf("association %d: Accept while the thread takes signals: %v", i, err)
		}
	}
}
