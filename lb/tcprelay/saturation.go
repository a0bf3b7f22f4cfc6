package tcprelay

import (
	"net/netip"
	"time"

	"kproxy.dev/kproxy/lb/eventloop"
)

// A Proxy's loops all park on Go's one netpoller, and the runtime has a
// single thread waiting there: while one loop runs, another loop's events
// wait until the first parks. Two loops that keep up with their traffic
// therefore take turns on one thread, each request waiting for the other
// loop's turn, and each turn costs a park and a wake-up of its own. So
// connections share one loop (up to growAt of them) until it falls behind
// (bench/MEASUREMENTS.md, "Keep-alive tail latency"): a loop that ends
// saturatedTurns turns in a row, over saturatedFor at least, with work left
// for the next turn is saturated, and moves half its connections to
// another loop, started if need be. Being busy is not enough: with request
// traffic on a loaded machine a loop rarely finds nothing to do, yet it
// keeps up.
const (
	saturatedTurns = 64
	saturatedFor   = 5 * time.Millisecond
)

// checkSaturation runs at the end of every turn.
func (l *loop) checkSaturation() {
	if len(l.later) > 0 {
		l.behind = true
	}
	if !l.behind {
		l.busyTurns = 0
		if l.saturated.Load() {
			l.saturated.Store(false)
		}
		return
	}
	l.behind = false
	if l.busyTurns++; l.busyTurns == 1 {
		l.busySince = time.Now()
		return
	}
	if l.busyTurns < l.p.cfg.saturatedTurns || l.busyTurns%8 != 0 || time.Since(l.busySince) < l.p.cfg.saturatedFor {
		return
	}
	l.saturated.Store(true)
	l.rebalance()
	l.busyTurns = 0 // look again after as long
}

// rebalance hands half the difference in connections to a loop with fewer
// that is not saturated, or to a new loop while there is room.
func (l *loop) rebalance() {
	if !l.attached || l.nconns < 2 {
		return
	}
	to := l.p.relief(l)
	if to == nil {
		return
	}
	n := (l.nconns - int(to.load.Load())) / 2
	var moving []*conn
	for c := l.conns.next; c != &l.conns && len(moving) < n; {
		next := c.next
		if c.state == relaying {
			l.unregister(c)
			moving = append(moving, c)
		}
		c = next
	}
	if len(moving) == 0 {
		return
	}
	if len(l.later) > 0 {
		kept := l.later[:0]
		for _, c := range l.later {
			if l.lookup(c.client.fd) == c {
				kept = append(kept, c)
			}
		}
		clear(l.later[len(kept):])
		l.later = kept
	}
	to.load.Add(int32(len(moving)))
	if !to.post(func(to *loop) { to.migrants = append(to.migrants, moving...) }) {
		to.load.Add(-int32(len(moving)))
		for _, c := range moving {
			l.adopt(c)
		}
	}
}

// unregister takes a relaying connection off the loop without closing it,
// for another loop to adopt.
func (l *loop) unregister(c *conn) {
	l.armKeepAlive(c) // now rather than queued on two loops
	for _, s := range [2]*side{&c.client, &c.backend} {
		_ = l.poll.Del(s.fd)
		l.byFD[s.fd] = nil
	}
	c.deferred = false
	c.prev.next, c.next.prev = c.next, c.prev
	c.prev, c.next = nil, nil
	l.nconns--
	l.load.Add(-1)
}

// adopt takes over a relaying connection another loop unregistered. Its
// sockets may have become ready meanwhile, unseen: both count as readable
// and writable, and a read or write that finds otherwise says so.
func (l *loop) adopt(c *conn) {
	l.link(c)
	for _, s := range [2]*side{&c.client, &c.backend} {
		if err := l.register(c, s); err != nil {
			l.p.log.Error(err, "Cannot move a connection to another event loop; resetting it", "client", c.clientIP)
			l.release(c, true, true)
			return
		}
		s.readable, s.writable = true, true
	}
	l.service(c)
}

// dropMigrant resets a connection handed to a loop that exited before
// adopting it.
func (l *loop) dropMigrant(c *conn) {
	for _, s := range [2]*side{&c.client, &c.backend} {
		if s.dialed.IsValid() {
			l.p.cfg.Dials.Remove(s.dialed, s.dialedTo) // before the port can be reused
			s.dialed, s.dialedTo = netip.AddrPort{}, netip.AddrPort{}
		}
		eventloop.CloseWithReset(s.fd)
		s.fd = -1
		l.closeSide(s, true) // frees buffers and pipes
	}
	if c.portHeld {
		c.port.Release(false)
		c.portHeld = false
	}
	l.load.Add(-1)
	l.p.connDone(c.metrics)
}

// relief returns the loop a saturated loop l should hand connections to:
// the least loaded other loop that is neither saturated nor as loaded as
// l, else a new loop while there is room; nil if there is none.
func (p *Proxy) relief(l *loop) *loop {
	var best *loop
	for _, o := range p.loops() {
		if o == l || o.saturated.Load() || o.load.Load() >= l.load.Load()-1 {
			continue
		}
		if best == nil || o.load.Load() < best.load.Load() {
			best = o
		}
	}
	if best != nil {
		return best
	}
	var err error
	p.mu.Lock()
	n := int(p.nloops.Load())
	if !p.isClosed() && n < p.maxLoops && (!p.raw || p.listenFD >= 0) {
		if err = p.addLoopLocked(); err == nil {
			best = p.loopSet[n]
		}
	}
	p.mu.Unlock()
	if err != nil {
		p.logErrorLimited(err, "Cannot start another event loop")
	}
	return best
}
