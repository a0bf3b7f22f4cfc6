// Package sctprelay relays SCTP associations to service endpoints over
// one-to-one (SOCK_STREAM) SCTP sockets, moving bytes like a TCP relay; no
// multi-homing. Kernels without SCTP sockets are detected with Supported,
// and the SCTP service ports that then go unserved are reported by
// UnservedReporter.
//
// Why goroutines per association rather than lb/eventloop: SCTP services
// are rare and only served where the kernel has SCTP, so the relay stays
// small, copying through Go's netpoller.
package sctprelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/selfdial"
)

// DefaultDialTimeout bounds one association attempt before failing over.
const DefaultDialTimeout = 3 * time.Second

// Config configures a Relay.
type Config struct {
	// Listener is the proxy socket; the relay owns it from New on.
	Listener *Listener
	Picker   lb.Picker
	// DialTimeout bounds each endpoint attempt; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	Metrics     *lbmetrics.Metrics
	Name        string
	// Dials are the outgoing connections of every relay of the process:
	// the relay adds its own associations, and refuses one that comes from
	// one of them (reason loop), since an endpoint that leads back into
	// kproxy would otherwise make the relays dial themselves without end.
	// Nil checks nothing.
	Dials *selfdial.Dials
	// Port bounds the associations of the service port this relay serves,
	// shared with its other relays (other addresses, families); a new one
	// past it is refused (reason service_port_full). Nil bounds nothing.
	Port *fdbudget.Port
	// Logger receives the relay's log lines, with "relay" set to Name; the
	// zero value means klog.Background().
	Logger klog.Logger
}

// Relay accepts associations on its listener and relays each to an
// endpoint the picker chooses.
type Relay struct {
	cfg     Config
	log     klog.Logger
	metrics *lbmetrics.Protocol

	mu     sync.Mutex
	picker lb.Picker
	conns  map[*Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New prepares a relay; Serve runs it.
func New(cfg Config) (*Relay, error) {
	if cfg.Listener == nil || cfg.Picker == nil {
		return nil, errors.New("sctp relay: listener and picker are required")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	log := cfg.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	return &Relay{cfg: cfg, log: log.WithValues("relay", cfg.Name), metrics: cfg.Metrics.For(lbmetrics.ProtocolSCTP), picker: cfg.Picker,
		conns: map[*Conn]struct{}{}}, nil
}

// SetPicker replaces the picker for new associations.
func (r *Relay) SetPicker(p lb.Picker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.picker = p
}

// Addr is the proxy socket's address.
func (r *Relay) Addr() netip.AddrPort { return r.cfg.Listener.Addr() }

// Serve accepts until ctx is cancelled or Close is called.
func (r *Relay) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = r.Close() })
	defer stop()
	for {
		c, err := r.cfg.Listener.Accept()
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return nil
			}
			r.metrics.AcceptErrors.Inc()
			r.log.Error(err, "SCTP accept failed")
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: do not spin
			continue
		}
		if !r.track(c) {
			c.Close()
			return nil
		}
		r.wg.Add(1)
		go r.handle(c)
	}
}

func (r *Relay) track(c *Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c *Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.conns, c)
}

// Close stops accepting, ends every relayed association and waits for them.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.cfg.Listener.Close()
	r.wg.Wait()
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("sctp relay %s: %w", r.cfg.Name, err)
	}
	return nil
}

func (r *Relay) handle(client *Conn) {
	defer r.wg.Done()
	defer r.untrack(client)
	r.mu.Lock()
	picker := r.picker
	r.mu.Unlock()
	if dial, ok := r.returning(client); ok {
		r.refuseLoop(client, dial)
		return
	}
	clientIP := client.RemoteAddr().Addr()
	candidates := picker.Pick(clientIP)
	if len(candidates) == 0 {
		r.metrics.RejectedNoEndpoints.Inc()
		client.Close()
		return
	}
	if v := r.cfg.Port.Admit(); v != fdbudget.PortAdmitted {
		r.metrics.RejectedPortFull.Inc()
		held, dialing := r.cfg.Port.Held()
		r.log.V(2).Info("Refusing association: the service port holds its share of descriptors", "why", v.String(),
			"client", client.RemoteAddr(), "associations", held, "dialing", dialing)
		client.Abort()
		return
	}
	dialing := true
	defer func() { r.cfg.Port.Release(dialing) }()
	var backend *Conn
	for _, ep := range candidates {
		c, err := dial(ep, r.cfg.DialTimeout, r.remember(ep))
		if err == nil {
			backend = c
			picker.Connected(clientIP, ep)
			break
		}
		r.metrics.DialFailures.Inc()
		picker.Failed(clientIP, ep)
		r.log.V(2).Info("SCTP endpoint failed, trying the next", "endpoint", ep, "err", err)
	}
	if backend == nil {
		r.metrics.RejectedDialFailed.Inc()
		client.Close()
		return
	}
	r.cfg.Port.Dialed()
	dialing = false
	if !r.track(backend) {
		backend.Close()
		client.Close()
		return
	}
	defer r.untrack(backend)
	r.metrics.ConnectionsTotal.Inc()
	r.metrics.ConnectionsActive.Inc()
	defer r.metrics.ConnectionsActive.Dec()
	toEndpoint, toClient := Pipe(client, backend)
	r.metrics.BytesToEndpoint.Add(float64(toEndpoint))
	r.metrics.BytesToClient.Add(float64(toClient))
}

// remember returns the hook that adds an association dialed to ep to the
// relays' own dials (and forgets it before its socket closes); nil when the
// relay checks for no loops.
func (r *Relay) remember(ep netip.AddrPort) func(local netip.AddrPort) (forget func()) {
	dials := r.cfg.Dials
	if dials == nil {
		return nil
	}
	return func(local netip.AddrPort) func() {
		dials.Add(local, selfdial.Dial{From: r.cfg.Name, Endpoint: ep})
		return func() { dials.Remove(local, ep) }
	}
}

// returning says whether client is an association one of the relays
// dialed: its peer is the dial's local address and it was addressed to the
// endpoint the dial went to.
func (r *Relay) returning(client *Conn) (selfdial.Dial, bool) {
	if r.cfg.Dials == nil {
		return selfdial.Dial{}, false
	}
	dst, err := client.destination()
	if err != nil {
		return selfdial.Dial{}, false
	}
	return r.cfg.Dials.Returning(client.RemoteAddr(), dst)
}

// refuseLoop aborts an association that one of the relays dialed: an
// endpoint leads back into kproxy. The relay that dialed it sees the abort
// and ends its own client's association in turn, so the request fails at
// once instead of dialling itself again. Logged once per service port.
func (r *Relay) refuseLoop(client *Conn, dial selfdial.Dial) {
	r.metrics.RejectedLoop.Inc()
	if r.cfg.Dials.FirstLoop(dial.From, time.Now()) {
		r.log.Info("Refusing an SCTP association from kproxy itself: an endpoint of a service port leads back into kproxy, "+
			"so its associations fail (logged once per service port)",
			"servicePort", dial.From, "endpoint", dial.Endpoint, "from", client.RemoteAddr())
	}
	client.Abort()
}

// Stream is one side of a relayed connection. *Conn, *net.TCPConn and
// *net.UnixConn satisfy it.
type Stream interface {
	io.ReadWriteCloser
}

// Pipe copies bytes both ways until the association ends, and reports the
// bytes moved each way. SCTP has no half-open state: a peer that received
// SHUTDOWN may not send any more (its writes fail with EPIPE), and a socket
// that sent SHUTDOWN never reads end-of-stream once the association is
// gone. So when either side ends, cleanly or not, Pipe closes both streams:
// an SCTP close is itself a graceful SHUTDOWN that first delivers what is
// queued, which passes the end on to the other side.
func Pipe(client, endpoint Stream) (toEndpoint, toClient int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		toClient = copyHalf(client, endpoint)
	}()
	toEndpoint = copyHalf(endpoint, client)
	wg.Wait()
	client.Close()
	endpoint.Close()
	return toEndpoint, toClient
}

// copyHalf moves src to dst until src ends or dst fails, then closes both,
// which also stops the opposite direction's copy (see Pipe).
func copyHalf(dst, src Stream) int64 {
	buf := make([]byte, 32<<10)
	n, _ := io.CopyBuffer(onlyWriter{dst}, struct{ io.Reader }{src}, buf)
	src.Close()
	dst.Close()
	return n
}

// onlyWriter hides ReadFrom so io.CopyBuffer uses its buffer.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }
