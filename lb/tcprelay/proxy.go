// Package tcprelay is the userspace mode's TCP data plane: one Proxy per
// service-port listener accepts the connections a portal rule redirected
// to it, refuses those that did not come through a portal (no open relay),
// picks an endpoint through an lb.Picker with bounded fail-over, and relays
// bytes both ways, preserving half-close and resets.
//
// A Proxy may also serve a shared listener (Config.Routes): one socket,
// to which socket-lookup steering sends the connections of every service
// address, each served by the Route its local address chooses. Services
// then cost no descriptor, loop or goroutine of their own.
//
// Why event loops (lb/eventloop) rather than goroutines per connection: an
// idle connection then holds no goroutine, buffer or pipe, and a busy one
// costs a read and a write per event. A loop reads into a buffer borrowed
// for the turn and writes straight to the peer, keeping a pooled buffer
// only while the peer's send buffer is full; a direction that moves bulk
// switches to splice(2). A Proxy starts one loop and adds loops up to
// GOMAXPROCS when a loop has many connections or falls behind
// (saturation.go). bench/MEASUREMENTS.md has the numbers behind these
// choices.
package tcprelay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/selfdial"
)

const (
	// DefaultDialTimeout bounds one connection attempt to an endpoint.
	DefaultDialTimeout = time.Second
	// DefaultMaxAttempts bounds fail-over: at most this many endpoints are
	// tried per client connection, so a client waits at most
	// MaxAttempts × DialTimeout before it is reset.
	DefaultMaxAttempts = 3

	defaultSpliceAfter = 64 << 10

	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
	errorLogInterval = 10 * time.Second
)

// Config configures a Proxy.
type Config struct {
	// Listener is the bound listening socket (from lb/ports); the Proxy owns
	// it from New on and closes it in Close. A *net.TCPListener is watched
	// by the event loops themselves; any other listener is served by an
	// Accept goroutine, and its connections must be *net.TCPConn.
	Listener net.Listener
	// Picker chooses endpoints; SetPicker swaps it. A nil Picker refuses
	// every client as having no endpoints.
	Picker lb.Picker
	// DialTimeout bounds each dial attempt (DefaultDialTimeout if zero).
	DialTimeout time.Duration
	// MaxAttempts bounds the endpoints tried per connection
	// (DefaultMaxAttempts if zero).
	MaxAttempts int
	// Metrics receives the TCP data-plane metrics; nil counts nowhere. A
	// shared listener's routes may count into metrics of their own
	// (Route.Metrics).
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
	// Direct: the listener is bound to the service address itself (a
	// local portal), so connections arrive unrewritten and there is no
	// original destination to check; IsPortalDestination is not used.
	Direct bool
	// Admit, when set, decides by the client's address whether a
	// connection may be proxied (loadBalancerSourceRanges); a refused one is
	// reset at accept and counted. Nil admits every client.
	Admit func(client netip.Addr) bool
	// SpliceAfter is how many bytes a direction copies with read/write
	// before it may switch to splice(2), which it does on the next read
	// that fills the buffer (a bulk transfer, not small messages): 0 means
	// the default (64 KiB), a negative value never splices. Mostly for
	// tests and benchmarks.
	SpliceAfter int64
	// Loops is the most event loops sharing the connections; 0 means
	// GOMAXPROCS when Serve starts. One starts with Serve, more as
	// connections come and loops fall behind.
	Loops int
	// Dials are the outgoing connections of every relay of the process:
	// the proxy adds its own, and refuses a connection that comes from one
	// of them (reason loop), since an endpoint that leads back into kproxy
	// would otherwise make the relays dial themselves without end. Nil
	// checks nothing.
	Dials *selfdial.Dials
	// Port bounds the connections of the service port this proxy serves,
	// shared with its other proxies (other addresses, families); a new
	// connection past it is refused (reason service_port_full). Nil bounds
	// nothing.
	Port *fdbudget.Port
	// Routes, when set, makes the listener a shared one (Direct must be
	// set too): a socket-lookup program steers connections for many service
	// addresses to it, and each accepted connection's local address (its
	// original destination) chooses the Route that serves it. A connection
	// with no route, or made to the listener's own address, is reset and
	// counted as not through a portal. Picker, Admit and Port of Config are
	// then unused. It is called once per accepted connection, from the
	// event loops, with the address IPv4-unmapped, so it must be safe for
	// concurrent use and quick (a lock-free map lookup).
	Routes func(local netip.AddrPort) (*Route, bool)
	// KeepSource, when set, dials the endpoints it says so from the
	// client's own address (an endpoint on this node), so that the endpoint
	// sees the client as kube-proxy's DNAT would show it. A failure there
	// falls back to an ordinary dial, counted. Nil dials every endpoint from
	// the node.
	KeepSource *keepsource.Keeper
	// Logger receives the proxy's log lines, with "proxy" set to its name;
	// the zero value means klog.Background().
	Logger klog.Logger

	// When a loop counts as saturated (saturation.go); zero means
	// saturatedTurns and saturatedFor. Tests lower them.
	saturatedTurns int
	saturatedFor   time.Duration
	// keepAliveDelay replaces defaultKeepAliveDelay when set; tests
	// change it.
	keepAliveDelay time.Duration
}

// Route is what serves one service address of a shared listener.
type Route struct {
	// Name is the route's name in logs and in loop reports (the service
	// port).
	Name string
	// Picker chooses endpoints; nil, or one that picks none, resets the
	// client (no endpoints).
	Picker lb.Picker
	// Admit decides by the client's address (loadBalancerSourceRanges);
	// nil admits every client.
	Admit func(client netip.Addr) bool
	// Port bounds the service port's connections, shared with its other
	// addresses; nil bounds nothing.
	Port *fdbudget.Port
	// Metrics count the route's connections from the moment it is known
	// (refusals, dials, connections, bytes), so that a shared listener's
	// service ports are counted apart; nil counts into the proxy's own.
	// What comes before a route (accept errors, connections not through a
	// portal or looping back into kproxy) is the proxy's.
	Metrics *lbmetrics.Protocol
}

// metricsOr is what r's connections count into, the proxy's own (own)
// unless r has metrics of its own.
func (r *Route) metricsOr(own *lbmetrics.Protocol) *lbmetrics.Protocol {
	if r.Metrics != nil {
		return r.Metrics
	}
	return own
}

// Proxy relays one listener's connections.
type Proxy struct {
	cfg  Config
	name string
	log  klog.Logger
	ln   net.Listener
	port uint16 // the listener's port
	// listenAddr is the listener's address, IPv4-mapped addresses
	// unmapped.
	listenAddr netip.AddrPort
	// route serves the connections of a listener that is not shared: the
	// Config's picker (swapped by SetPicker), Admit and Port.
	route   atomic.Pointer[Route]
	metrics *lbmetrics.Protocol
	pools   *pools

	closeOnce sync.Once
	closed    chan struct{}
	serving   atomic.Bool
	forced    atomic.Bool // CloseAll was called
	active    atomic.Int64

	// The event loops (loops.go): loopSet has room for maxLoops, the
	// first nloops are running. raw: they watch the listener themselves,
	// through listenFD.
	maxLoops int
	loopSet  []*loop
	nloops   atomic.Int32
	raw      bool
	running  sync.WaitGroup // loop goroutines

	mu       sync.Mutex
	listenFD int // the loops' descriptor of the listener; -1 if none
	// listenRefs counts the loops watching listenFD; the last to stop
	// closes it, so no loop can accept on a reused descriptor.
	listenRefs int

	lastErrLog time.Time // guarded by mu
	suppressed int       // errors not logged since lastErrLog; guarded by mu
}

// New validates cfg and returns a Proxy; call Serve to start accepting.
func New(cfg Config) (*Proxy, error) {
	if cfg.Listener == nil {
		return nil, errors.New("tcprelay: Config.Listener is required")
	}
	if cfg.DialTimeout < 0 || cfg.MaxAttempts < 0 || cfg.Loops < 0 {
		return nil, fmt.Errorf("tcprelay %s: negative DialTimeout (%v), MaxAttempts (%d) or Loops (%d)",
			cfg.Name, cfg.DialTimeout, cfg.MaxAttempts, cfg.Loops)
	}
	if cfg.Routes != nil && !cfg.Direct {
		return nil, fmt.Errorf("tcprelay %s: a shared listener (Routes) must be Direct: its connections arrive unrewritten", cfg.Name)
	}
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, DefaultDialTimeout)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.SpliceAfter = cmp.Or(cfg.SpliceAfter, defaultSpliceAfter)
	cfg.saturatedTurns = cmp.Or(cfg.saturatedTurns, saturatedTurns)
	cfg.saturatedFor = cmp.Or(cfg.saturatedFor, saturatedFor)
	cfg.keepAliveDelay = cmp.Or(cfg.keepAliveDelay, defaultKeepAliveDelay)
	name := cfg.Name
	name = cmp.Or(name, cfg.Listener.Addr().String())
	if tl, ok := cfg.Listener.(*net.TCPListener); ok {
		// Now rather than in Serve: a connection that completes its
		// handshake in between would not inherit them.
		if err := optionsOnListener(tl); err != nil {
			return nil, fmt.Errorf("tcprelay %s: %w", name, err)
		}
	}
	var port uint16
	var listenAddr netip.AddrPort
	if a, ok := cfg.Listener.Addr().(*net.TCPAddr); ok {
		port = uint16(a.Port)
		listenAddr = a.AddrPort()
		listenAddr = netip.AddrPortFrom(listenAddr.Addr().Unmap(), port)
	}
	log := cfg.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	p := &Proxy{
		cfg:        cfg,
		name:       name,
		log:        log.WithValues("proxy", name),
		ln:         cfg.Listener,
		port:       port,
		listenAddr: listenAddr,
		metrics:    cfg.Metrics.For(lbmetrics.ProtocolTCP),
		pools:      newPools(),
		closed:     make(chan struct{}),
		listenFD:   -1,
	}
	p.SetPicker(cfg.Picker)
	return p, nil
}

// Addr is the listener's address (its port is the proxy port portals
// redirect to).
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// SetPicker swaps the picker for new connections; established ones are not
// affected. A shared listener's routes have their own pickers.
func (p *Proxy) SetPicker(pk lb.Picker) {
	p.route.Store(&Route{Name: p.name, Picker: pk, Admit: p.cfg.Admit, Port: p.cfg.Port})
}

// ResetPort resets the connections of one service port of a shared
// listener, those holding port (its Route's): the service is gone, and so
// are its endpoints. Connections accepted meanwhile find no route if the
// caller removed it first.
func (p *Proxy) ResetPort(port *fdbudget.Port) {
	if port == nil {
		return
	}
	p.postAll(func(l *loop) { l.resetPorts = append(l.resetPorts, port) })
}

// ActiveConnections is the number of connections currently relayed.
func (p *Proxy) ActiveConnections() int { return int(p.active.Load()) }

// Serve starts the event loops and accepts connections until Close is
// called or ctx is done (which acts like Close: established connections
// keep relaying). It returns nil then. Accepting never waits for a dial.
func (p *Proxy) Serve(ctx context.Context) error {
	if !p.serving.CompareAndSwap(false, true) {
		return fmt.Errorf("tcprelay %s: Serve called twice", p.name)
	}
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	defer stop()

	// Starting the loops needs descriptors; out of them, back off and
	// retry as accepting does, rather than leave the port unserved.
	var backoff time.Duration
	for {
		err := p.startLoops()
		if err == nil {
			break
		}
		if p.isClosed() {
			return nil
		}
		p.metrics.AcceptErrors.Inc()
		backoff = nextBackoff(backoff)
		p.logErrorLimited(err, "Cannot start the relay's event loops; backing off", "backoff", backoff)
		if !p.sleep(backoff) {
			return nil
		}
	}
	if !p.raw {
		return p.acceptGoroutine()
	}
	<-p.closed
	return nil
}

// connStarted and connDone count a relayed connection into m, its
// route's metrics.
func (p *Proxy) connStarted(m *lbmetrics.Protocol) {
	p.active.Add(1)
	m.ConnectionsTotal.Inc()
	m.ConnectionsActive.Inc()
}

func (p *Proxy) connDone(m *lbmetrics.Protocol) {
	p.active.Add(-1)
	m.ConnectionsActive.Dec()
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
	p.log.Error(err, msg, append([]any{"suppressedSinceLastLog", suppressed}, kv...)...)
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
		p.mu.Lock()
		close(p.closed)
		if p.listenFD >= 0 {
			// Stops the socket listening at once, whoever still holds a
			// descriptor of it: new clients are refused, and every loop
			// watching it wakes up to let go.
			_ = unix.Shutdown(p.listenFD, unix.SHUT_RD)
		}
		p.mu.Unlock()
		if p.raw {
			p.postAll(func(l *loop) { l.detach = true })
		}
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
	p.forced.Store(true)
	err := p.Close()
	p.postAll(func(l *loop) { l.abort = true })
	return err
}
