// Package httplimit bounds what clients can hold of kproxy's HTTP servers
// (healthz, metrics, health-check node ports) without letting them lock
// out anyone else. The healthz and health-check servers listen on every
// address by default and cloud load balancers probe them, so the limits
// must hold two things at once: a bound on descriptors (connections in all
// and per source address), and an answer for every well-behaved probe,
// however many slow or idle connections others keep open.
//
// When a limit is reached the newcomer is not refused: the listener closes
// the connection that is doing the least for anyone, one that is not in
// the middle of answering a request, from the source holding the most
// connections, the one that has waited longest. A slow or idle
// connection therefore holds its slot only until someone needs it.
package httplimit

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

const (
	// DefaultTotal and DefaultPerSource bound a server's open connections.
	DefaultTotal     = 256
	DefaultPerSource = 16
	// ReadHeaderTimeout bounds how long a request's headers may take to
	// arrive: a probe's arrive at once, a slowloris' never.
	ReadHeaderTimeout = 5 * time.Second
	// Timeouts of a hardened server: reading a whole request, writing an
	// answer, and an idle keep-alive connection.
	ReadTimeout  = 10 * time.Second
	WriteTimeout = 10 * time.Second
	IdleTimeout  = 30 * time.Second
	// ServeGrace is how long a handler may run before its connection may be
	// closed for a newcomer, and then only when every connection is being
	// served. The health handlers answer in microseconds; a handler can run
	// long only when its client does not read the answer.
	ServeGrace = 2 * time.Second
	// MaxHeaderBytes is far more than any probe sends.
	MaxHeaderBytes = 16 << 10
)

// Listener accepts at most total connections at once, perSource of them
// from one address. At a limit it makes room by closing the connection
// that victim chooses, and refuses the newcomer only when every connection
// it could close is busy answering a request.
type Listener struct {
	net.Listener
	total, perSource int
	// Refused, when set, is called for each new connection closed for a
	// limit; Evicted for each open one closed to make room.
	Refused func(remote net.Addr)
	Evicted func(remote net.Addr)

	mu       sync.Mutex
	conns    map[*conn]struct{}
	bySource map[netip.Addr]int
	open     []*conn     // scratch for admit
	held     []candidate // scratch for admit
}

// Limit wraps ln; zero limits take the defaults. Harden the server that
// serves it with the listener's Harden, so that it knows which connections
// are answering a request.
func Limit(ln net.Listener, total, perSource int) *Listener {
	if total <= 0 {
		total = DefaultTotal
	}
	if perSource <= 0 {
		perSource = DefaultPerSource
	}
	return &Listener{Listener: ln, total: total, perSource: perSource,
		conns: map[*conn]struct{}{}, bySource: map[netip.Addr]int{}}
}

// Accept returns the next connection, making room for it if need be.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		admitted, evicted := l.admit(c, time.Now())
		if evicted != nil {
			_ = evicted.Conn.Close()
			if l.Evicted != nil {
				l.Evicted(evicted.RemoteAddr())
			}
		}
		if admitted != nil {
			return admitted, nil
		}
		_ = c.Close()
		if l.Refused != nil {
			l.Refused(c.RemoteAddr())
		}
	}
}

// admit tracks c, first choosing (and untracking) a connection to close if
// a limit is reached; it returns nil for c when there is none.
func (l *Listener) admit(c net.Conn, now time.Time) (admitted, evicted *conn) {
	src := sourceOf(c.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySource[src] >= l.perSource || len(l.conns) >= l.total {
		// At its own source's limit a newcomer can only replace one of
		// its own connections.
		ownOnly := l.bySource[src] >= l.perSource
		// The scratch slices are reused: under a flood of connections
		// every accept comes here, and it must stay cheap.
		l.open, l.held = l.open[:0], l.held[:0]
		for o := range l.conns {
			if ownOnly && o.source != src {
				continue
			}
			l.open = append(l.open, o)
			l.held = append(l.held, candidate{source: o.source, serving: o.serving, since: o.since})
		}
		i := victim(l.held, l.bySource, src, now)
		if i < 0 {
			return nil, nil
		}
		evicted = l.open[i]
		clear(l.open)
		l.untrackLocked(evicted)
	}
	admitted = &conn{Conn: c, l: l, source: src, since: now}
	l.conns[admitted] = struct{}{}
	l.bySource[src]++
	return admitted, evicted
}

// candidate describes an open connection to victim.
type candidate struct {
	source netip.Addr
	// serving: a handler is answering a complete request on it.
	serving bool
	// since: when it was accepted, or its last handler started or ended.
	since time.Time
}

// victim chooses which of held to close so that a connection from src can
// be admitted, or returns -1 to refuse it. bySource counts every open
// connection by source.
//
// A connection not being served (waiting for, or reading, a request) goes
// before one whose handler is running, and the latter only once it has
// run ServeGrace: a probe that got its request in is answered. Among
// equals, the source holding the most connections (counting the newcomer)
// loses one, so that a source with few connections always displaces one
// with many; then the connection that has waited longest, so that a
// newcomer is the last one closed and has its request answered first.
func victim(held []candidate, bySource map[netip.Addr]int, src netip.Addr, now time.Time) int {
	load := func(s netip.Addr) int {
		if s == src {
			return bySource[s] + 1
		}
		return bySource[s]
	}
	tier := func(h candidate) int {
		switch {
		case !h.serving:
			return 0
		case now.Sub(h.since) >= ServeGrace:
			return 1
		default:
			return -1 // never
		}
	}
	best := -1
	for i, h := range held {
		if tier(h) < 0 {
			continue
		}
		if best < 0 || worse(h, held[best], tier, load) {
			best = i
		}
	}
	return best
}

// worse says whether a is a better connection to close than b.
func worse(a, b candidate, tier func(candidate) int, load func(netip.Addr) int) bool {
	if ta, tb := tier(a), tier(b); ta != tb {
		return ta < tb
	}
	if la, lb := load(a.source), load(b.source); la != lb {
		return la > lb
	}
	return a.since.Before(b.since)
}

func (l *Listener) untrackLocked(c *conn) {
	if _, ok := l.conns[c]; !ok {
		return
	}
	delete(l.conns, c)
	if l.bySource[c.source] <= 1 {
		delete(l.bySource, c.source)
	} else {
		l.bySource[c.source]--
	}
}

func (l *Listener) setServing(c *conn, serving bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.serving = serving
	c.since = time.Now()
}

// Open returns the connections held, in all and from src.
func (l *Listener) Open(src netip.Addr) (all, fromSource int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns), l.bySource[src]
}

func sourceOf(a net.Addr) netip.Addr {
	if tcp, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(tcp.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// conn gives its slot back once, however often it is closed. Its other
// fields are guarded by l.mu.
type conn struct {
	net.Conn
	l       *Listener
	source  netip.Addr
	serving bool
	since   time.Time
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.untrackLocked(c)
	c.l.mu.Unlock()
	return err
}

type connKey struct{}

// Harden sets srv's timeouts and header limit, and wraps its handler so
// that l knows which connections are answering a request: the server's
// own connection states cannot tell, as it reports a connection active
// from the first byte of a request, which a slowloris sends. srv must
// serve l, and its Handler must be set. boundedWrites says whether answers
// may be bounded in time (not for pprof's 30-second profiles).
func (l *Listener) Harden(srv *http.Server, boundedWrites bool) {
	srv.ReadHeaderTimeout = ReadHeaderTimeout
	srv.ReadTimeout = ReadTimeout
	srv.IdleTimeout = IdleTimeout
	srv.MaxHeaderBytes = MaxHeaderBytes
	if boundedWrites {
		srv.WriteTimeout = WriteTimeout
	}
	next := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if next != nil {
			ctx = next(ctx, c)
		}
		if own, ok := c.(*conn); ok && own.l == l {
			ctx = context.WithValue(ctx, connKey{}, own)
		}
		return ctx
	}
	handler := srv.Handler
	if handler == nil {
		handler = http.DefaultServeMux
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*conn); ok {
			l.setServing(c, true)
			defer l.setServing(c, false)
		}
		handler.ServeHTTP(w, r)
	})
}
