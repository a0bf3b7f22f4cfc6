package tcprelay

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/fdbudget"
)

const (
	// maxEvents is the epoll_wait batch.
	maxEvents = 128
	// connEvents: edge-triggered, so a socket whose reading is paused for
	// backpressure costs nothing until it is resumed, and no epoll_ctl is
	// ever needed after registration.
	connEvents = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
	// listenerGen tags the listener's events; connections' generations
	// skip it.
	listenerGen = 0
)

// loop is one event loop: an epoll set (lb/eventloop) with its share of
// the Proxy's connections, served by one goroutine. Only the loop's
// goroutine touches its connections; other goroutines reach it through
// post.
type loop struct {
	p    *Proxy
	poll *eventloop.Poller

	// Owned by the loop goroutine.
	byFD      []*conn // by either socket's descriptor
	gen       uint32
	conns     conn      // list head: every connection of this loop
	nconns    int       // len(conns list)
	dials     connQueue // connects in progress
	unarmed   connQueue // dialed sockets still without keep-alive (timers.go)
	later     []*conn   // connections with more to move this turn
	buf       *[]byte   // this turn's read buffer
	listenFD  int       // the Proxy's listener while this loop accepts from it, else -1
	accepting bool      // listenFD is in the epoll set (not backing off)
	attached  bool      // new connections may still come (listener or acceptor)
	backoff   time.Duration
	resumeAt  time.Time // when accepting resumes after an error; zero when not paused

	spliceAfter int64

	// behind: this turn left work for the next (a direction cut off by
	// turnBudget, connections left in the listener's queue). Consecutive
	// such turns, and when they began (saturation.go).
	behind    bool
	busyTurns int
	busySince time.Time
	// saturated: the loop has been behind for saturatedFor; it gets no
	// new connections and hands some of its own to another loop.
	saturated atomic.Bool

	// load is the loop's connections, counting those handed over but not
	// yet taken: new connections go to the least loaded loop.
	load atomic.Int32
	// What other goroutines post (post.go), then wake the poller.
	mu       sync.Mutex
	inbox    []adopted
	migrants []*conn // connections another loop hands over (saturation.go)
	detach   bool    // stop taking new connections
	abort    bool    // reset every connection (CloseAll)
	// resetPorts are service ports whose connections to reset (ResetPort).
	resetPorts []*fdbudget.Port
	dead       bool // the loop has exited: posts are refused
}

// adopted is a connection accepted outside the loop (a listener that is not
// a *net.TCPListener), handed over as a bare descriptor.
type adopted struct {
	fd   int
	peer netip.AddrPort
}

func newLoop(p *Proxy, listenFD int) (*loop, error) {
	poll, err := eventloop.New("tcp-relay-epoll", maxEvents)
	if err != nil {
		return nil, err
	}
	l := &loop{
		p:           p,
		poll:        poll,
		listenFD:    listenFD,
		attached:    true,
		spliceAfter: p.cfg.SpliceAfter,
	}
	l.conns.next, l.conns.prev = &l.conns, &l.conns
	if listenFD >= 0 {
		if err := l.watchListener(); err != nil {
			poll.Close()
			return nil, err
		}
	}
	return l, nil
}

// watchListener adds the listener to the epoll set, level-triggered: a loop
// takes a few connections per event and leaves the rest to the next turn or
// to another loop.
func (l *loop) watchListener() error {
	if err := l.poll.Add(l.listenFD, unix.EPOLLIN, listenerGen); err != nil {
		return fmt.Errorf("watching the listener: %w", err)
	}
	l.accepting = true
	return nil
}

// run serves events until the loop has no connections and can get no more.
func (l *loop) run() {
	defer l.exit()
	for {
		events, err := l.poll.Wait(l.nextTimer(), len(l.later) > 0)
		if err != nil {
			l.p.log.Error(err, "TCP relay loop cannot wait for events; resetting its connections")
			l.abortAll()
			l.stopAccepting()
			return
		}
		for i := range events {
			l.handle(&events[i])
		}
		l.serveDeferred()
		if l.poll.Woken() {
			l.takePosted()
		}
		if l.dials.head != nil || l.unarmed.head != nil || !l.resumeAt.IsZero() {
			l.runTimers(time.Now())
		}
		l.checkSaturation()
		l.releaseBuffer()
		if !l.attached && l.nconns == 0 {
			return
		}
	}
}

// handle applies one event: the listener has connections, or a socket's
// readiness changed.
func (l *loop) handle(ev *unix.EpollEvent) {
	fd := int(ev.Fd)
	if ev.Pad == listenerGen {
		if fd == l.listenFD {
			l.acceptReady()
		}
		return
	}
	c := l.lookup(fd)
	if c == nil {
		return
	}
	s := &c.client
	if fd == c.backend.fd {
		s = &c.backend
	}
	if s.gen != uint32(ev.Pad) {
		return // the descriptor was closed and reused since
	}
	// Errors and hang-ups mark the socket both ways so that the next read or
	// write meets them.
	if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		s.readable = true
	}
	if ev.Events&unix.EPOLLRDHUP != 0 {
		s.finSeen = true
	}
	if ev.Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		s.broken = true
	}
	if ev.Events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		s.writable = true
	}
	switch c.state {
	case dialing:
		if s == &c.backend {
			l.connectDone(c, ev.Events)
		}
	case relaying:
		if ev.Events&unix.EPOLLERR != 0 && s.eof && !s.pending() {
			// Nothing will read or write this socket again, so nothing
			// else would notice its error: pass the reset on now.
			l.release(c, s == &c.backend, s == &c.client)
			return
		}
		l.service(c)
	}
}

// register adds s's socket to the epoll set for c, under a new generation.
func (l *loop) register(c *conn, s *side) error {
	if l.gen++; l.gen == listenerGen {
		l.gen++
	}
	s.gen = l.gen
	if err := l.poll.Add(s.fd, connEvents, int32(s.gen)); err != nil {
		return fmt.Errorf("watching a socket: %w", err)
	}
	for s.fd >= len(l.byFD) {
		l.byFD = append(l.byFD, make([]*conn, max(64, len(l.byFD)))...)
	}
	l.byFD[s.fd] = c
	return nil
}

func (l *loop) lookup(fd int) *conn {
	if fd < 0 || fd >= len(l.byFD) {
		return nil
	}
	return l.byFD[fd]
}
