package tcprelay

import (
	"errors"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/selfdial"
)

var (
	errDialTimeout   = errors.New("connect timed out")
	errConnectFailed = errors.New("connect failed")
)

// admit takes a new client connection: the open-relay check, the route
// that serves it, the endpoints to try, then the first connect. The loop
// owns fd from here on.
func (l *loop) admit(fd int, peer netip.AddrPort) {
	p := l.p
	var dst netip.AddrPort // where the client connected to, before a portal
	var route *Route
	switch {
	case p.cfg.Routes != nil:
		var ok bool
		if dst, route, ok = p.routeOf(fd, peer); !ok {
			p.metrics.RejectedDirect.Inc()
			eventloop.CloseWithReset(fd)
			return
		}
	case p.cfg.Direct:
		if p.cfg.Dials != nil {
			dst = p.directDestination(fd)
		}
		route = p.route.Load()
	default:
		var ok bool
		if dst, ok = p.fromPortal(fd, peer); !ok {
			p.metrics.RejectedDirect.Inc()
			eventloop.CloseWithReset(fd)
			return
		}
		route = p.route.Load()
	}
	if dial, ok := p.cfg.Dials.Returning(peer, dst); ok {
		l.refuseLoop(fd, peer, dial)
		return
	}
	clientIP := peer.Addr().Unmap()
	m := route.metricsOr(p.metrics)
	if route.Admit != nil && !route.Admit(clientIP) {
		m.RejectedSourceRange.Inc()
		p.log.V(4).Info("Refusing connection from outside the source ranges", p.routeKV(route, "client", peer)...)
		eventloop.CloseWithReset(fd)
		return
	}
	var endpoints []netip.AddrPort
	if route.Picker != nil {
		endpoints = route.Picker.Pick(clientIP)
	}
	if len(endpoints) == 0 {
		m.RejectedNoEndpoints.Inc()
		p.log.V(4).Info("Refusing connection: no endpoints", p.routeKV(route, "client", peer)...)
		eventloop.CloseWithReset(fd)
		return
	}
	if v := route.Port.Admit(); v != fdbudget.PortAdmitted {
		m.RejectedPortFull.Inc()
		held, dialing := route.Port.Held()
		p.logErrorLimited(errors.New(v.String()), "Refusing connection: the service port holds its share of descriptors",
			p.routeKV(route, "client", peer, "connections", held, "dialing", dialing)...)
		eventloop.CloseWithReset(fd)
		return
	}
	c := &conn{
		port:      route.Port,
		portHeld:  true,
		client:    side{fd: fd, writable: true},
		backend:   side{fd: -1},
		clientIP:  clientIP,
		route:     route,
		metrics:   m,
		endpoints: endpoints[:min(len(endpoints), p.cfg.MaxAttempts)],
	}
	if err := l.register(c, &c.client); err != nil {
		p.log.Error(err, "Cannot relay connection", p.routeKV(route, "client", peer)...)
		route.Port.Release(true)
		eventloop.CloseWithReset(fd)
		return
	}
	l.link(c)
	l.dialNext(c)
}

// dialNext starts connecting to the next endpoint to try, refusing the
// client when none is left.
func (l *loop) dialNext(c *conn) {
	p := l.p
	for c.attempt < len(c.endpoints) {
		ep := c.endpoints[c.attempt]
		fd, flow, done, keepErr, err := startConnect(ep, p.cfg.KeepSource, lb.KeepsSource(c.route.Picker), c.clientIP)
		if keepErr != nil {
			c.metrics.KeepSourceFailures.Inc()
			p.logErrorLimited(keepErr, "Cannot dial an endpoint on this node from the client's address; dialling from the node's",
				p.routeKV(c.route, "client", c.clientIP, "endpoint", ep)...)
		}
		if flow.IsValid() {
			c.metrics.KeptSource.Inc()
		}
		if err == nil {
			c.backend = side{fd: fd, writable: true, kept: flow}
			l.rememberDial(c, &c.backend, ep)
			if err = l.register(c, &c.backend); err != nil {
				l.closeSide(&c.backend, false)
			}
		}
		if err != nil {
			if isFDExhaustion(err) {
				p.logErrorLimited(err, "Out of file descriptors dialling an endpoint; refusing the client",
					p.routeKV(c.route, "endpoint", ep)...)
				l.reject(c, lbmetrics.ReasonFDExhausted)
				return
			}
			l.dialFailed(c, err)
			continue
		}
		if done {
			l.connected(c)
			return
		}
		c.deadline = time.Now().Add(p.cfg.DialTimeout)
		l.dials.push(c)
		return
	}
	p.log.V(2).Info("Refusing connection: every endpoint tried failed",
		p.routeKV(c.route, "client", c.clientIP, "attempts", c.attempt)...)
	l.reject(c, lbmetrics.ReasonDialFailed)
}

// connectDone handles an event on a connecting backend socket: connected,
// or failed (then the next endpoint is tried).
func (l *loop) connectDone(c *conn, events uint32) {
	var err error
	switch {
	case events&(unix.EPOLLERR|unix.EPOLLHUP) != 0:
		if err = eventloop.SocketError(c.backend.fd); err == nil {
			err = errConnectFailed
		}
	case events&unix.EPOLLOUT == 0:
		return // not yet: neither connected nor failed
	}
	l.dials.remove(c)
	if err != nil {
		l.closeSide(&c.backend, false)
		l.dialFailed(c, err)
		l.dialNext(c)
		return
	}
	l.connected(c)
}

// rememberDial adds c's backend socket s, just connecting to ep, to the
// relays' own dials, so a connection it makes back into kproxy is known
// for one.
func (l *loop) rememberDial(c *conn, s *side, ep netip.AddrPort) {
	dials := l.p.cfg.Dials
	if dials == nil {
		return
	}
	local, err := localAddr(s.fd)
	if err != nil {
		return // not connecting after all: the connect's own error follows
	}
	s.dialed, s.dialedTo = local, ep
	dials.Add(local, selfdial.Dial{From: c.route.Name, Endpoint: ep})
}

// refuseLoop resets a connection that one of the relays dialed: an
// endpoint leads back into kproxy. The relay that dialed it sees the reset
// and resets its own client in turn, so the request fails at once instead
// of dialling itself again. Logged once per service port.
func (l *loop) refuseLoop(fd int, peer netip.AddrPort, dial selfdial.Dial) {
	p := l.p
	p.metrics.RejectedLoop.Inc()
	if p.cfg.Dials.FirstLoop(dial.From, time.Now()) {
		p.log.Info("Refusing a connection from kproxy itself: an endpoint of a service port leads back into kproxy, "+
			"so its connections fail (logged once per service port)",
			"servicePort", dial.From, "endpoint", dial.Endpoint, "from", peer)
	}
	eventloop.CloseWithReset(fd)
}

// connected starts relaying c.
func (l *loop) connected(c *conn) {
	c.port.Dialed()
	c.route.Picker.Connected(c.clientIP, c.endpoints[c.attempt])
	c.route, c.endpoints = nil, nil
	c.state = relaying
	l.p.connStarted(c.metrics)
	l.deferKeepAlive(c)
	l.service(c)
}

// dialFailed counts a failed attempt and moves on to the next endpoint.
func (l *loop) dialFailed(c *conn, err error) {
	ep := c.endpoints[c.attempt]
	c.metrics.DialFailures.Inc()
	c.route.Picker.Failed(c.clientIP, ep)
	l.p.log.V(2).Info("Dialling endpoint failed, trying the next",
		l.p.routeKV(c.route, "client", c.clientIP, "endpoint", ep, "err", err)...)
	c.attempt++
}

// reject refuses c's client with a reset, so it sees a refusal at once
// instead of a hang or a clean (and misleading) end of stream.
func (l *loop) reject(c *conn, reason string) {
	c.metrics.Rejected(reason).Inc()
	l.release(c, true, false)
}

// expireDials fails the connects that ran out of time. All of a loop's
// connects have the same timeout, so the queue is in deadline order.
func (l *loop) expireDials(now time.Time) {
	for c := l.dials.head; c != nil && !now.Before(c.deadline); c = l.dials.head {
		l.dials.remove(c)
		l.closeSide(&c.backend, false)
		l.dialFailed(c, errDialTimeout)
		l.dialNext(c)
	}
}

// connQueue is a queue of the loop's connections waiting for a deadline
// (conn.deadline), oldest first: every connection in one queue waits as
// long, so pushing at the tail keeps it in deadline order. A loop has two:
// connects in progress (dials) and relaying connections whose dialed
// socket has no keep-alive yet (unarmed); a connection is in one at most,
// by its state, and they share its links.
type connQueue struct{ head, tail *conn }

func (q *connQueue) push(c *conn) {
	c.dprev, c.dnext = q.tail, nil
	if q.tail != nil {
		q.tail.dnext = c
	} else {
		q.head = c
	}
	q.tail = c
}

// remove takes c off the queue; it is a no-op if c is not on it.
func (q *connQueue) remove(c *conn) {
	if c.dprev == nil && q.head != c {
		return
	}
	if c.dprev != nil {
		c.dprev.dnext = c.dnext
	} else {
		q.head = c.dnext
	}
	if c.dnext != nil {
		c.dnext.dprev = c.dprev
	} else {
		q.tail = c.dprev
	}
	c.dprev, c.dnext = nil, nil
}
