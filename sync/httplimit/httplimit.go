// Package httplimit bounds what one client can hold of kproxy's HTTP
// servers (healthz, metrics, health-check node ports): connections in all
// and per source address, and how long a connection may sit idle or dribble
// its request. The healthz and health-check servers listen on every address
// by default, so a remote host could otherwise keep hundreds of idle
// connections open, each a descriptor the data plane needs.
package httplimit

import (
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
	// Timeouts of a hardened server: reading a request, writing an answer,
	// and an idle keep-alive connection.
	ReadTimeout  = 10 * time.Second
	WriteTimeout = 10 * time.Second
	IdleTimeout  = 30 * time.Second
	// MaxHeaderBytes is far more than any probe sends.
	MaxHeaderBytes = 16 << 10
)

// Listener accepts at most total connections at once, perSource of them
// from one address; it closes the others as they arrive.
type Listener struct {
	net.Listener
	total, perSource int
	// Refused, when set, is called for each connection closed for a limit.
	Refused func(remote net.Addr)

	mu       sync.Mutex
	open     int
	bySource map[netip.Addr]int
}

// Limit wraps ln; zero limits take the defaults.
func Limit(ln net.Listener, total, perSource int) *Listener {
	if total <= 0 {
		total = DefaultTotal
	}
	if perSource <= 0 {
		perSource = DefaultPerSource
	}
	return &Listener{Listener: ln, total: total, perSource: perSource, bySource: map[netip.Addr]int{}}
}

// Accept returns the next connection within the limits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c.RemoteAddr())
		if l.admit(src) {
			return &conn{Conn: c, release: func() { l.release(src) }}, nil
		}
		c.Close()
		if l.Refused != nil {
			l.Refused(c.RemoteAddr())
		}
	}
}

func (l *Listener) admit(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.total || l.bySource[src] >= l.perSource {
		return false
	}
	l.open++
	l.bySource[src]++
	return true
}

func (l *Listener) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.bySource[src] <= 1 {
		delete(l.bySource, src)
	} else {
		l.bySource[src]--
	}
}

// Open returns the connections held, in all and from src.
func (l *Listener) Open(src netip.Addr) (all, fromSource int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.bySource[src]
}

func sourceOf(a net.Addr) netip.Addr {
	if tcp, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(tcp.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// conn gives its slot back once, however often it is closed.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Harden sets srv's timeouts and header limit. writes says whether
// answers may be bounded in time (not for pprof's 30-second profiles).
func Harden(srv *http.Server, boundedWrites bool) {
	srv.ReadHeaderTimeout = ReadTimeout
	srv.ReadTimeout = ReadTimeout
	srv.IdleTimeout = IdleTimeout
	srv.MaxHeaderBytes = MaxHeaderBytes
	if boundedWrites {
		srv.WriteTimeout = WriteTimeout
	}
}
