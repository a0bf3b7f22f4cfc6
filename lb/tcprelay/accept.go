package tcprelay

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
)

// acceptBatch is how many connections a loop accepts per listener event.
// Every loop watches the listener; a small batch leaves the rest of a burst
// to the next turn or to another loop.
const acceptBatch = 4

// acceptReady accepts waiting connections and admits each here or hands it
// to a less loaded loop.
func (l *loop) acceptReady() {
	for range acceptBatch {
		fd, peer, err := accept(l.listenFD)
		switch {
		case err == nil:
			l.backoff = 0
			if to := l.p.leastLoaded(l); to != l {
				to.handOver(adopted{fd, peer})
			} else {
				l.admit(fd, peer)
			}
			l.p.maybeGrow()
			continue
		case err == unix.EAGAIN:
			return
		case err == unix.ECONNABORTED:
			continue // the client gave up while queued
		case err == unix.EINVAL || err == unix.EBADF:
			l.stopAccepting() // the listener was shut down (Close)
			return
		}
		l.acceptFailed(err)
		return
	}
	l.behind = true // more connections wait than a turn takes
}

// acceptFailed backs off: the listener leaves the epoll set until the
// back-off ends, so that a level-triggered listener with connections the
// process cannot take (out of descriptors) does not spin the loop.
func (l *loop) acceptFailed(err error) {
	l.p.metrics.AcceptErrors.Inc()
	l.backoff = nextBackoff(l.backoff)
	msg := "Accepting a connection failed; backing off"
	if isFDExhaustion(err) {
		msg = "Out of file descriptors accepting connections; backing off"
	}
	l.p.logErrorLimited(err, msg, "backoff", l.backoff)
	if l.accepting {
		_ = l.poll.Del(l.listenFD)
		l.accepting = false
	}
	l.resumeAt = time.Now().Add(l.backoff)
}

func (l *loop) resumeAccepting() {
	l.resumeAt = time.Time{}
	if l.listenFD < 0 || l.accepting {
		return
	}
	if err := l.watchListener(); err != nil {
		l.acceptFailed(err)
	}
}

// stopAccepting detaches the loop from the listener for good; the last loop
// to let go closes the Proxy's descriptor of it.
func (l *loop) stopAccepting() {
	l.attached = false
	l.resumeAt = time.Time{}
	if l.listenFD < 0 {
		return
	}
	if l.accepting {
		_ = l.poll.Del(l.listenFD)
		l.accepting = false
	}
	l.listenFD = -1
	l.p.listenerReleased()
}

// acceptGoroutine serves a listener the loops cannot watch (not a
// *net.TCPListener): it accepts with Accept, backing off on errors, and
// hands each connection's socket to a loop, round-robin. It returns nil
// once the Proxy is closed.
func (p *Proxy) acceptGoroutine() error {
	defer p.postAll(func(l *loop) { l.detach = true })
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			p.metrics.AcceptErrors.Inc()
			backoff = nextBackoff(backoff)
			if isFDExhaustion(err) {
				p.logErrorLimited(err, "Out of file descriptors accepting connections; backing off", "backoff", backoff)
			} else {
				p.logErrorLimited(err, "Accepting a connection failed; backing off", "backoff", backoff)
			}
			if !p.sleep(backoff) {
				return nil
			}
			continue
		}
		backoff = 0
		if a, ok := p.detachConn(c); ok {
			p.leastLoaded(nil).handOver(a)
			p.maybeGrow()
		}
	}
}

// detachConn takes the socket of a connection Go's net package accepted
// out of Go's hands: the loop gets a duplicate descriptor, the original is
// closed (which also unregisters it from Go's netpoller).
func (p *Proxy) detachConn(c net.Conn) (adopted, bool) {
	defer c.Close()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		p.metrics.AcceptErrors.Inc()
		return adopted{}, false
	}
	a := adopted{peer: addrPortOf(tc.RemoteAddr())}
	var err error
	if a.fd, err = eventloop.Dup(tc); err != nil {
		p.logErrorLimited(err, "Cannot take over an accepted connection; refusing it", "client", a.peer)
		_ = tc.SetLinger(0)
		return adopted{}, false
	}
	return a, true
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	return netip.AddrPort{}
}

// directDestination is where a client of a listener bound to the service
// address itself connected to: the listener's address, read from the
// socket only when the listener is bound to a wildcard address.
func (p *Proxy) directDestination(fd int) netip.AddrPort {
	if p.listenAddr.Addr().IsValid() && !p.listenAddr.Addr().IsUnspecified() {
		return p.listenAddr
	}
	local, err := localAddr(fd)
	if err != nil {
		return netip.AddrPort{}
	}
	return local
}

// fromPortal is the open-relay check: only connections that a portal rule
// redirected here may be proxied. It returns the original destination.
func (p *Proxy) fromPortal(fd int, client netip.AddrPort) (netip.AddrPort, bool) {
	orig, err := originalDestination(fd, client.Addr().Is6() && !client.Addr().Is4In6())
	if err != nil {
		p.log.V(4).Info("Refusing connection without an original destination (not through a portal)",
			"client", client, "err", err)
		return netip.AddrPort{}, false
	}
	orig = netip.AddrPortFrom(orig.Addr().Unmap(), orig.Port())
	// The local port is the proxy port, so only an original destination on
	// that port can be the proxy's own address; only then is the local
	// address worth a system call.
	if orig.Port() == p.port {
		local, err := localAddr(fd)
		if err != nil || orig == netip.AddrPortFrom(local.Addr().Unmap(), local.Port()) {
			p.log.V(4).Info("Refusing connection made straight to the proxy port", "client", client)
			return netip.AddrPort{}, false
		}
	}
	if p.cfg.IsPortalDestination != nil && !p.cfg.IsPortalDestination(orig) {
		p.log.V(4).Info("Refusing connection to an address that is not a portal of this proxy",
			"client", client, "originalDestination", orig)
		return netip.AddrPort{}, false
	}
	return orig, true
}

// routeOf is the open-relay check of a shared listener: the connection's
// local address is where the client connected to (a socket-lookup program
// steered it here unrewritten), and only an address with a route may be
// proxied. It is the one getsockname per connection a shared listener
// pays, and the lookup key.
func (p *Proxy) routeOf(fd int, client netip.AddrPort) (netip.AddrPort, *Route, bool) {
	local, err := localAddr(fd)
	if err != nil {
		p.log.V(4).Info("Refusing connection without a local address", "client", client, "err", err)
		return netip.AddrPort{}, nil, false
	}
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	if local == p.listenAddr {
		p.log.V(4).Info("Refusing connection made straight to the shared listener", "client", client)
		return netip.AddrPort{}, nil, false
	}
	route, ok := p.cfg.Routes(local)
	if !ok || route == nil {
		p.log.V(4).Info("Refusing connection to an address no service port serves here",
			"client", client, "destination", local)
		return netip.AddrPort{}, nil, false
	}
	return local, route, true
}

// routeKV adds the route's name to a log line's key-value pairs on a
// shared listener; a listener of one service port is named by its logger
// already.
func (p *Proxy) routeKV(r *Route, kv ...any) []any {
	if p.cfg.Routes == nil || r == nil {
		return kv
	}
	return append(kv, "route", r.Name)
}
