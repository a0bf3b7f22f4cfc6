package tcprelay

import (
	"net/netip"

	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/keepsource"
)

// closeSide closes s's socket (which takes it out of the epoll set: the
// loop holds its only descriptor), with a reset if asked, and frees what it
// holds.
func (l *loop) closeSide(s *side, reset bool) {
	if s.dialed.IsValid() {
		l.p.cfg.Dials.Remove(s.dialed, s.dialedTo) // before the port can be reused
		s.dialed, s.dialedTo = netip.AddrPort{}, netip.AddrPort{}
	}
	if s.fd >= 0 {
		if l.lookup(s.fd) != nil {
			l.byFD[s.fd] = nil
		}
		if reset {
			eventloop.CloseWithReset(s.fd)
		} else {
			eventloop.Close(s.fd)
		}
		s.fd = -1
	}
	if s.kept.IsValid() {
		if err := l.p.cfg.KeepSource.Release(s.kept); err != nil {
			l.p.logErrorLimited(err, "Cannot remove the steering of a closed connection's replies", "flow", s.kept)
		}
		s.kept = keepsource.Flow{}
	}
	if s.outBuf != nil {
		l.p.pools.putBuf(s.outBuf)
		s.out, s.outBuf = nil, nil
	}
	if s.pipe != nil {
		if s.inPipe == 0 {
			l.p.pools.putPipe(s.pipe)
		} else {
			s.pipe.close() // holds bytes nobody will read
		}
		s.pipe, s.inPipe = nil, 0
	}
}

// release ends c: its sockets are closed (with a reset where asked), it
// leaves every list, and the metrics and counts forget it.
func (l *loop) release(c *conn, resetClient, resetBackend bool) {
	if c.state == released {
		return
	}
	wasRelaying := c.state == relaying
	if c.portHeld {
		c.port.Release(c.state == dialing)
		c.portHeld = false
	}
	if c.state == dialing {
		l.dials.remove(c)
	}
	l.dropKeepAlive(c)
	c.state = released
	l.closeSide(&c.client, resetClient)
	l.closeSide(&c.backend, resetBackend)
	c.prev.next, c.next.prev = c.next, c.prev
	c.prev, c.next = nil, nil
	c.route, c.endpoints = nil, nil
	l.nconns--
	l.load.Add(-1)
	if wasRelaying {
		l.p.connDone(c.metrics)
	}
}

// link makes c one of the loop's connections.
func (l *loop) link(c *conn) {
	c.prev, c.next = l.conns.prev, &l.conns
	l.conns.prev.next = c
	l.conns.prev = c
	l.nconns++
	l.load.Add(1)
}

// abortAll resets every connection of the loop (CloseAll).
func (l *loop) abortAll() {
	for l.conns.next != &l.conns {
		l.release(l.conns.next, true, true)
	}
}

// resetPort resets the loop's connections of the service port whose bound
// is port (ResetPort).
func (l *loop) resetPort(port *fdbudget.Port) {
	for c := l.conns.next; c != &l.conns; {
		next := c.next
		if c.port == port {
			l.release(c, true, true)
		}
		c = next
	}
}

// serveLater queues c to be served again at the end of the turn: a
// direction stopped with bytes left to read (edge-triggered: no new event
// will say so).
func (l *loop) serveLater(c *conn) {
	if !c.deferred {
		c.deferred = true
		l.later = append(l.later, c)
	}
}

func (l *loop) serveDeferred() {
	if len(l.later) == 0 {
		return
	}
	later := l.later
	l.later = nil
	for i, c := range later {
		later[i] = nil
		c.deferred = false
		l.service(c)
	}
	if l.later == nil {
		l.later = later[:0] // keep the array
	}
}

// buffer is the turn's read buffer, taken from the pool on first use.
func (l *loop) buffer() []byte {
	if l.buf == nil {
		l.buf = l.p.pools.getBuf()
	}
	return *l.buf
}

// releaseBuffer returns the turn's buffer before the loop may park, so an
// idle loop holds none.
func (l *loop) releaseBuffer() {
	if l.buf != nil {
		l.p.pools.putBuf(l.buf)
		l.buf = nil
	}
}
