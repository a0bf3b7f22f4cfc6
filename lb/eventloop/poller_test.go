package eventloop

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pipe returns a non-blocking pipe, closed when the test ends.
func pipe(t *testing.T) (r, w int) {
	t.Helper()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Close(fds[0]); Close(fds[1]) })
	return fds[0], fds[1]
}

func newPoller(t *testing.T) *Poller {
	t.Helper()
	p, err := New("test-epoll", 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup runs before Wait; it may start goroutines.
		setup      func(t *testing.T, p *Poller, w int)
		deadline   time.Duration // from now; 0: none
		busy       bool
		wantEvents int
		wantWoken  bool
	}{
		{
			name:       "readable descriptor",
			setup:      func(t *testing.T, p *Poller, w int) { write(t, w) },
			wantEvents: 1,
		},
		{
			name:     "deadline passes",
			setup:    func(*testing.T, *Poller, int) {},
			deadline: 20 * time.Millisecond,
		},
		{
			name:      "woken before waiting",
			setup:     func(_ *testing.T, p *Poller, _ int) { p.Wake() },
			wantWoken: true,
		},
		{
			name: "woken while parked",
			setup: func(_ *testing.T, p *Poller, _ int) {
				go func() {
					for !p.parked.Load() {
						time.Sleep(time.Millisecond)
					}
					p.Wake()
				}()
			},
			wantWoken: true,
		},
		{
			name:  "busy: polls without parking",
			setup: func(*testing.T, *Poller, int) {},
			busy:  true,
		},
		{
			name:       "busy: still returns what is ready",
			setup:      func(t *testing.T, p *Poller, w int) { write(t, w) },
			busy:       true,
			wantEvents: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPoller(t)
			r, w := pipe(t)
			if err := p.Add(r, unix.EPOLLIN, 42); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, p, w)
			var deadline time.Time
			if tc.deadline > 0 {
				deadline = time.Now().Add(tc.deadline)
			}
			done := make(chan struct{})
			var events []unix.EpollEvent
			var err error
			go func() {
				defer close(done)
				events, err = p.Wait(deadline, tc.busy)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Wait did not return")
			}
			if err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if len(events) != tc.wantEvents {
				t.Fatalf("Wait returned %d events, want %d", len(events), tc.wantEvents)
			}
			for _, ev := range events {
				if int(ev.Fd) != r || ev.Pad != 42 || ev.Events&unix.EPOLLIN == 0 {
					t.Errorf("event %+v, want EPOLLIN for fd %d with data 42", ev, r)
				}
			}
			if got := p.Woken(); got != tc.wantWoken {
				t.Errorf("Woken() = %v, want %v", got, tc.wantWoken)
			}
			if p.Woken() {
				t.Error("Woken() true twice for one Wake")
			}
		})
	}
}

// TestWaitAfterDeadline checks that a fired deadline is set again: the next
// Wait must park until its own deadline, not return at once for the old one.
func TestWaitAfterDeadline(t *testing.T) {
	p := newPoller(t)
	for i, d := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond} {
		start := time.Now()
		events, err := p.Wait(start.Add(d), false)
		if err != nil || len(events) != 0 {
			t.Fatalf("Wait %d: %d events, %v; want none, nil", i, len(events), err)
		}
		if took := time.Since(start); took < d {
			t.Errorf("Wait %d returned after %v, before its deadline %v", i, took, d)
		}
	}
}

func TestAddDel(t *testing.T) {
	p := newPoller(t)
	r, _ := pipe(t)
	for _, tc := range []struct {
		name string
		op   func() error
		want error // as the kernel reports it
	}{
		{"add", func() error { return p.Add(r, unix.EPOLLIN, 0) }, nil},
		{"add again", func() error { return p.Add(r, unix.EPOLLIN, 0) }, unix.EEXIST},
		{"del", func() error { return p.Del(r) }, nil},
		{"del again", func() error { return p.Del(r) }, unix.ENOENT},
		{"add a bad descriptor", func() error { return p.Add(-1, unix.EPOLLIN, 0) }, unix.EBADF},
	} {
		if err := tc.op(); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestNewRejectsNoEvents(t *testing.T) {
	if _, err := New("test-epoll", 0); err == nil {
		t.Error("New with maxEvents 0 succeeded, want an error")
	}
}

func TestWakeAfterClose(t *testing.T) {
	p, err := New("test-epoll", 1)
	if err != nil {
		t.Fatal(err)
	}
	p.parked.Store(true) // as if the loop died parked
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p.Wake() // must neither panic nor touch a reused descriptor
	if !p.Woken() {
		t.Error("Woken() = false after Wake")
	}
}

func write(t *testing.T, fd int) {
	t.Helper()
	if _, err := unix.Write(fd, []byte{1}); err != nil {
		t.Fatal(err)
	}
}
