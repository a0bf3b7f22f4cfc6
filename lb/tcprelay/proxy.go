// Package tcprelay is the userspace mode's TCP data plane: one Proxy per
// service-port listener accepts connections that a portal rule redirected
// to it, picks an endpoint through an lb.Picker with bounded fail-over, and
// relays bytes both ways, preserving half-close and resets.
package tcprelay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/lbmetrics"
)

const (
	// DefaultDialTimeout bounds one connection attempt to an endpoint.
	DefaultDialTimeout = time.Second
	// DefaultMaxAttempts bounds fail-over: at most this many endpoints are
	// tried per client connection, so a client waits at most
	// MaxAttempts × DialTimeout before it is reset.
	DefaultMaxAttempts = 3

	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
	errorLogInterval = 10 * time.Second
)

// Config configures a Proxy.
type Config struct {
	// Listener is the bound listening socket (from lb/ports); the Proxy owns
	// it from New on and closes it in Close. Accepted connections must be
	// *net.TCPConn.
	Listener net.Listener
	// Picker chooses endpoints; SetPicker swaps it. A nil Picker refuses
	// every client as having no endpoints.
	Picker lb.Picker
	// DialTimeout bounds each dial attempt (DefaultDialTimeout if zero).
	DialTimeout time.Duration
	// MaxAttempts bounds the endpoints tried per connection
	// (DefaultMaxAttempts if zero).
	MaxAttempts int
	// Metrics receives the TCP data-plane metrics; nil counts nowhere.
	Metrics *lbmetrics.Metrics
	// Name identifies the proxy in logs, e.g. the service port name.
	Name string
	// IsPortalDestination reports whether an original destination (the
	// address the client connected to before a portal rewrote it) is one of
	// this proxy's portals. A connection whose original destination cannot
	// be read, equals the proxy's own address, or is rejected by this
	// function is refused: the proxy is not an open relay. Nil accepts any
	// destination other than the proxy's own address.
	IsPortalDestination func(netip.AddrPort) bool
	// SpliceAfter is how many bytes a direction copies with read/write
	// before switching to splice(2): 0 means the default (64 KiB), a
	// negative value never splices. Mostly for benchmarks.
	SpliceAfter int64
}

// Proxy relays one listener's connections.
type Proxy struct {
	cfg     Config
	name    string
	ln      net.Listener
	picker  atomic.Pointer[pickerBox]
	metrics *lbmetrics.Protocol
	pools   *pools
	dialer  net.Dialer

	// dialCtx is cancelled by CloseAll so in-flight dials stop too.
	dialCtx    context.Context
	cancelDial context.CancelFunc

	closeOnce sync.Once
	closed    chan struct{}
	serving   atomic.Bool

	mu     sync.Mutex
	conns  map[*relayConn]struct{}
	forced bool

	lastErrLog time.Time // guarded by mu
	suppressed int       // errors not logged since lastErrLog; guarded by mu
}

type pickerBox struct{ p lb.Picker }

// New validates cfg and returns a Proxy; call Serve to start accepting.
func New(cfg Config) (*Proxy, error) {
	if cfg.Listener == nil {
		return nil, errors.New("tcprelay: Config.Listener is required")
	}
	if cfg.DialTimeout < 0 || cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("tcprelay %s: negative DialTimeout (%v) or MaxAttempts (%d)", cfg.Name, cfg.DialTimeout, cfg.MaxAttempts)
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.SpliceAfter == 0 {
		cfg.SpliceAfter = defaultSpliceAfter
	}
	name := cfg.Name
	if name == "" {
		name = cfg.Listener.Addr().String()
	}
	p := &Proxy{
		cfg:     cfg,
		name:    name,
		ln:      cfg.Listener,
		metrics: cfg.Metrics.For(lbmetrics.ProtocolTCP),
		pools:   newPools(),
		closed:  make(chan struct{}),
		conns:   map[*relayConn]struct{}{},
	}
	p.dialCtx, p.cancelDial = context.WithCancel(context.Background())
	p.picker.Store(&pickerBox{cfg.Picker})
	return p, nil
}

// Addr is the listener's address (its port is the proxy port portals
// redirect to).
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// SetPicker swaps the picker for new connections; established ones are not
// affected.
func (p *Proxy) SetPicker(pk lb.Picker) { p.picker.Store(&pickerBox{pk}) }

// ActiveConnections is the number of connections currently relayed.
func (p *Proxy) ActiveConnections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Serve accepts connections until Close is called or ctx is done (which
// acts like Close: established connections keep relaying). It returns nil
// then. Accepting never waits for a dial: each connection is handled on its
// own goroutine.
func (p *Proxy) Serve(ctx context.Context) error {
	if !p.serving.CompareAndSwap(false, true) {
		return fmt.Errorf("tcprelay %s: Serve called twice", p.name)
	}
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	defer stop()

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
		go p.handle(c)
	}
}

// nextBackoff doubles from minAcceptBackoff to maxAcceptBackoff.
func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return minAcceptBackoff
	}
	return min(2*d, maxAcceptBackoff)
}

func isFDExhaustion(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// sleep waits d, returning false early if the proxy is closed.
func (p *Proxy) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.closed:
		return false
	}
}

// logErrorLimited logs at most one error per errorLogInterval, saying how
// many were suppressed, so an fd storm cannot flood the log.
func (p *Proxy) logErrorLimited(err error, msg string, kv ...any) {
	p.mu.Lock()
	now := time.Now()
	if !p.lastErrLog.IsZero() && now.Sub(p.lastErrLog) < errorLogInterval {
		p.suppressed++
		p.mu.Unlock()
		return
	}
	suppressed := p.suppressed
	p.lastErrLog, p.suppressed = now, 0
	p.mu.Unlock()
	klog.ErrorS(err, msg, append([]any{"proxy", p.name, "suppressedSinceLastLog", suppressed}, kv...)...)
}

func (p *Proxy) isClosed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// Close stops accepting and closes the listener. Established connections
// keep relaying until they end; CloseAll ends them.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.closed)
		err = p.ln.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
	})
	if err != nil {
		return fmt.Errorf("tcprelay %s: closing listener: %w", p.name, err)
	}
	return nil
}

// CloseAll closes the listener, aborts in-flight dials and resets every
// established connection.
func (p *Proxy) CloseAll() error {
	err := p.Close()
	p.cancelDial()
	p.mu.Lock()
	p.forced = true
	conns := make([]*relayConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.abort(true, true)
	}
	return err
}

// reject refuses a client with a reset, so it sees a refusal at once instead
// of a hang or a clean (and misleading) end of stream.
func reject(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

func (p *Proxy) handle(c net.Conn) {
	client, ok := c.(*net.TCPConn)
	if !ok {
		p.metrics.AcceptErrors.Inc()
		_ = c.Close()
		return
	}
	clientAddr := addrPortOf(client.RemoteAddr())
	if !p.fromPortal(client, clientAddr) {
		p.metrics.RejectedDirect.Inc()
		reject(client)
		return
	}
	picker := p.picker.Load().p
	clientIP := clientAddr.Addr().Unmap()
	var endpoints []netip.AddrPort
	if picker != nil {
		endpoints = picker.Pick(clientIP)
	}
	if len(endpoints) == 0 {
		p.metrics.RejectedNoEndpoints.Inc()
		klog.V(4).InfoS("Refusing connection: no endpoints", "proxy", p.name, "client", clientAddr)
		reject(client)
		return
	}
	backend, reason := p.dial(picker, clientIP, endpoints)
	if backend == nil {
		if reason != "" {
			p.metrics.Rejected(reason).Inc()
		}
		reject(client)
		return
	}
	p.relay(client, backend)
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	return netip.AddrPort{}
}

// fromPortal is the open-relay check: only connections that a portal rule
// redirected here may be proxied.
func (p *Proxy) fromPortal(c *net.TCPConn, client netip.AddrPort) bool {
	orig, err := originalDestination(c)
	if err != nil {
		klog.V(4).InfoS("Refusing connection without an original destination (not through a portal)",
			"proxy", p.name, "client", client, "err", err)
		return false
	}
	orig = netip.AddrPortFrom(orig.Addr().Unmap(), orig.Port())
	local := addrPortOf(c.LocalAddr())
	if orig == netip.AddrPortFrom(local.Addr().Unmap(), local.Port()) {
		klog.V(4).InfoS("Refusing connection made straight to the proxy port", "proxy", p.name, "client", client)
		return false
	}
	if p.cfg.IsPortalDestination != nil && !p.cfg.IsPortalDestination(orig) {
		klog.V(4).InfoS("Refusing connection to an address that is not a portal of this proxy",
			"proxy", p.name, "client", client, "originalDestination", orig)
		return false
	}
	return true
}

// dial tries the endpoints in the picker's order, at most MaxAttempts of
// them. On failure it returns the rejection reason ("" when the proxy is
// being torn down).
func (p *Proxy) dial(picker lb.Picker, client netip.Addr, endpoints []netip.AddrPort) (*net.TCPConn, string) {
	attempts := min(len(endpoints), p.cfg.MaxAttempts)
	for _, ep := range endpoints[:attempts] {
		ctx, cancel := context.WithTimeout(p.dialCtx, p.cfg.DialTimeout)
		c, err := p.dialer.DialTCP(ctx, "tcp", netip.AddrPort{}, ep)
		cancel()
		if err == nil {
			picker.Connected(client, ep)
			return c, ""
		}
		if p.dialCtx.Err() != nil {
			return nil, ""
		}
		if isFDExhaustion(err) {
			p.logErrorLimited(err, "Out of file descriptors dialling an endpoint; refusing the client", "endpoint", ep)
			return nil, lbmetrics.ReasonFDExhausted
		}
		p.metrics.DialFailures.Inc()
		picker.Failed(client, ep)
		klog.V(2).InfoS("Dialling endpoint failed, trying the next", "proxy", p.name, "client", client, "endpoint", ep, "err", err)
	}
	klog.V(2).InfoS("Refusing connection: every endpoint tried failed", "proxy", p.name, "client", client, "attempts", attempts)
	return nil, lbmetrics.ReasonDialFailed
}

func (p *Proxy) relay(client, backend *net.TCPConn) {
	c := &relayConn{client: client, backend: backend, done: p.connDone}
	toEndpoint, err1 := newHalf(c, p.pools, true, p.metrics.BytesToEndpoint, p.cfg.SpliceAfter)
	toClient, err2 := newHalf(c, p.pools, false, p.metrics.BytesToClient, p.cfg.SpliceAfter)
	if err := errors.Join(err1, err2); err != nil {
		klog.ErrorS(err, "Cannot relay connection", "proxy", p.name)
		reject(client)
		_ = backend.Close()
		return
	}
	p.mu.Lock()
	if p.forced {
		p.mu.Unlock()
		reject(client)
		reject(backend)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	p.metrics.ConnectionsTotal.Inc()
	p.metrics.ConnectionsActive.Inc()

	c.running.Store(2)
	go toEndpoint.run()
	toClient.run()
}

func (p *Proxy) connDone(c *relayConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.metrics.ConnectionsActive.Dec()
}
