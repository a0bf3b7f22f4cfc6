package tcprelay

import "time"

// nextTimer is when the loop must wake for its timers (zero: none): the
// first dial deadline, the first dialed socket due its keep-alive options,
// or the end of an accept back-off.
func (l *loop) nextTimer() time.Time {
	t := l.resumeAt
	for _, q := range [2]*connQueue{&l.dials, &l.unarmed} {
		if h := q.head; h != nil && (t.IsZero() || h.deadline.Before(t)) {
			t = h.deadline
		}
	}
	return t
}

func (l *loop) runTimers(now time.Time) {
	l.expireDials(now)
	for c := l.unarmed.head; c != nil && !now.Before(c.deadline); c = l.unarmed.head {
		l.armKeepAlive(c)
	}
	if !l.resumeAt.IsZero() && !now.Before(l.resumeAt) {
		l.resumeAccepting()
	}
}

// Lazy keep-alive: a dialed socket gets its keep-alive options (three
// system calls) only once it has relayed for Config.keepAliveDelay; most
// connections of request traffic have ended by then and never pay them.
// The probes are not delayed: the delay is shorter than the idle time, and
// the options, set in keepAlive's order, time the first probe from the
// last segment received, as if they had been set at connect. Accepted
// sockets need none of this: they inherit the listener's options.

// deferKeepAlive queues c, just relaying, for its keep-alive options.
func (l *loop) deferKeepAlive(c *conn) {
	c.deadline = time.Now().Add(l.p.cfg.keepAliveDelay)
	c.keepAlivePending = true
	l.unarmed.push(c)
}

// armKeepAlive sets c's keep-alive options now, if it waits for them.
func (l *loop) armKeepAlive(c *conn) {
	if !c.keepAlivePending {
		return
	}
	l.dropKeepAlive(c)
	// An error means the socket is reset or gone; its events say so.
	_ = setKeepAlive(c.backend.fd)
}

// dropKeepAlive takes c off the unarmed queue.
func (l *loop) dropKeepAlive(c *conn) {
	if c.keepAlivePending {
		c.keepAlivePending = false
		l.unarmed.remove(c)
	}
}
