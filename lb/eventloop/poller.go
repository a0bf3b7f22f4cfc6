// Package eventloop is the core the TCP and UDP relays' event loops share:
// an epoll set parked on Go's netpoller, a wake-up for other goroutines,
// and the raw, non-blocking system calls the loops make.
//
// Why: a relay serves many sockets from one goroutine, without a goroutine
// per connection or flow, yet an idle loop must hold no thread. Registering
// the epoll descriptor with the netpoller gives both: the loop polls epoll
// without waiting and parks on the netpoller when nothing is ready. Timers
// and wake-ups are the descriptor's read deadline, so they need no extra
// descriptor or system call of their own.
package eventloop

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Poller is an epoll set registered with Go's netpoller. Wait, Add and Del
// belong to the one goroutine running the loop; Wake may be called from any
// goroutine.
type Poller struct {
	fd     int
	file   *os.File // fd, as the netpoller sees it
	rc     syscall.RawConn
	waitFn func(fd uintptr) bool
	events []unix.EpollEvent
	ready  int
	err    error

	// The read deadline set (armed) and whether it fired (expired): it is
	// set again only when a sooner one is wanted or it has fired.
	armed   time.Time
	expired bool

	// woken: Wake was called since the last Woken. parked: the loop is
	// about to park or parked; Wake sets the deadline only then.
	woken, parked atomic.Bool
}

// New creates an epoll set returning up to maxEvents events per Wait. name
// labels the descriptor (as os.File.Name).
func New(name string, maxEvents int) (*Poller, error) {
	if maxEvents <= 0 {
		return nil, fmt.Errorf("event loop %s: maxEvents %d, want > 0", name, maxEvents)
	}
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating epoll set: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("making epoll set non-blocking: %w", err)
	}
	p := &Poller{fd: fd, file: os.NewFile(uintptr(fd), name), events: make([]unix.EpollEvent, maxEvents)}
	if p.rc, err = p.file.SyscallConn(); err != nil {
		p.file.Close()
		return nil, fmt.Errorf("registering epoll set with the netpoller: %w", err)
	}
	p.waitFn = p.poll
	return p, nil
}

// Add watches fd for events (EPOLLIN, EPOLLET, ...); data comes back in
// each event's Pad field, Fd holds fd.
func (p *Poller) Add(fd int, events uint32, data int32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: data}
	return EpollCtl(p.fd, unix.EPOLL_CTL_ADD, fd, &ev)
}

// Del stops watching fd. Closing fd does that too, unless another
// descriptor of the same socket stays open.
func (p *Poller) Del(fd int) error {
	return EpollCtl(p.fd, unix.EPOLL_CTL_DEL, fd, &unix.EpollEvent{})
}

// Wait returns the ready events, parking on the netpoller until there are
// some, deadline passes (zero: none) or Wake is called; then it may return
// none. With busy set, or a Wake pending, it only polls. The events are
// valid until the next Wait.
func (p *Poller) Wait(deadline time.Time, busy bool) ([]unix.EpollEvent, error) {
	if err := p.arm(deadline); err != nil {
		return nil, err
	}
	p.ready, p.err = 0, nil
	// parked before woken: with Wake's stores in the opposite order, a
	// wake-up either is seen here or sees parked and sets the deadline.
	p.parked.Store(true)
	defer p.parked.Store(false)
	if busy || p.woken.Load() {
		p.poll(uintptr(p.fd))
		return p.events[:p.ready], p.err
	}
	if err := p.rc.Read(p.waitFn); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.expired = true
			return nil, nil
		}
		return nil, err
	}
	return p.events[:p.ready], p.err
}

// poll collects ready events without blocking; returning false parks the
// goroutine until the epoll set becomes readable.
func (p *Poller) poll(fd uintptr) bool {
	p.ready, p.err = Poll(int(fd), p.events)
	return p.ready > 0 || p.err != nil
}

// arm sets the read deadline to want when that is sooner than the one set,
// or when the last one fired. A deadline that fires early (its timer was
// cancelled or moved later meanwhile) only costs a turn that re-arms, which
// is cheaper than resetting the runtime's timer on every turn.
func (p *Poller) arm(want time.Time) error {
	if !p.expired && (want.IsZero() || (!p.armed.IsZero() && !want.Before(p.armed))) {
		return nil
	}
	if err := p.file.SetReadDeadline(want); err != nil {
		return fmt.Errorf("setting the loop's timer: %w", err)
	}
	p.armed, p.expired = want, false
	return nil
}

// Wake makes the loop's current or next Wait return soon. Callers hand the
// work over first (under their own lock); the loop finds it after Woken.
func (p *Poller) Wake() {
	p.woken.Store(true)
	if p.parked.Load() {
		// A deadline in the past makes the parked goroutine return; Wait
		// checks woken after arming its own deadline, so this cannot be
		// lost. After Close it fails, harmlessly.
		_ = p.file.SetReadDeadline(time.Unix(1, 0))
	}
}

// Woken reports whether Wake was called since it last returned true.
func (p *Poller) Woken() bool {
	if !p.woken.Load() {
		return false
	}
	p.woken.Store(false)
	return true
}

// Close closes the epoll set; a Wake after it does nothing.
func (p *Poller) Close() error { return p.file.Close() }
