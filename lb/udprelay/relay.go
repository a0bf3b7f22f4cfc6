// Package udprelay relays UDP datagrams from a proxy socket to service
// endpoints and back.
//
// Each client address gets a flow: a socket connected to the endpoint the
// picker chose, so the endpoint's replies arrive on that socket and are sent
// to the client from the proxy socket (for REDIRECTed traffic the kernel's
// conntrack rewrites their source back to the service address). Flows expire
// after IdleTimeout without traffic either way and are bounded by MaxFlows,
// the least recently active one being evicted first.
//
// Why one event loop (lb/eventloop) rather than a goroutine per flow: a
// relay is one goroutine holding the proxy socket and every upstream socket
// in one epoll set; client datagrams are read with recvmmsg(2) and replies
// written with sendmmsg(2), so a busy relay makes about two system calls
// per datagram pair instead of six or more, and an idle one parks on Go's
// netpoller. bench/MEASUREMENTS.md has the numbers behind these choices.
//
// Open-relay protection is not done here: for UDP the original destination
// of a REDIRECTed datagram cannot be read from the socket
// (IP_RECVORIGDSTADDR reports the address after NAT), so the guard is the
// kernel filter rule the portals install, which drops datagrams reaching a
// proxy port without having been DNATed (`-m conntrack ! --ctstate DNAT`).
//
// A relay can also serve many service addresses from one shared socket
// (Config.Routes), to which socket-lookup steering delivers every service
// address and port unchanged: each datagram's original destination, read
// from IP_ORIGDSTADDR, chooses the service, and replies leave through raw
// sockets (lb/rawudp) with that destination as their source address and
// port. Which kind a relay is is decided once, in New; the per-socket path
// does not pay for the other.
package udprelay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/rawudp"
	"kproxy.dev/kproxy/lb/selfdial"
)

const (
	// DefaultIdleTimeout is kube-proxy's --udp-timeout default.
	DefaultIdleTimeout = 250 * time.Millisecond
	// DefaultMaxFlows bounds a relay's flow table when Config.MaxFlows is 0.
	DefaultMaxFlows = 16384
	// DefaultBatchSize is how many datagrams one recvmmsg/sendmmsg moves.
	DefaultBatchSize = 16
	// BufferSize holds the largest UDP payload (65,507 bytes over IPv4,
	// 65,527 over IPv6) whole.
	BufferSize = 65536

	// maxEvents is the epoll_wait batch.
	maxEvents = 128
	// maxReadsPerEvent bounds how many replies one upstream socket may
	// deliver per loop turn, so one chatty endpoint cannot starve the rest.
	maxReadsPerEvent = 64
	// controlSize holds the IP_ORIGDSTADDR or IPV6_ORIGDSTADDR control
	// message of one datagram (a cmsghdr and a sockaddr_in6).
	controlSize = 64
)

// Config configures a Relay.
type Config struct {
	// Conn is the bound proxy socket. The relay owns it from New on and
	// closes it in Close.
	Conn *net.UDPConn
	// Picker chooses the endpoint of each new flow; SetPicker swaps it.
	Picker lb.Picker
	// IdleTimeout closes a flow after this long without a datagram in
	// either direction (--udp-timeout); 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxFlows bounds the flow table; 0 means DefaultMaxFlows. When it is
	// full the least recently active flow is evicted and counted.
	MaxFlows int
	// Metrics receives the relay's counters; nil counts nowhere.
	Metrics *lbmetrics.Metrics
	// Name identifies the relay in logs, e.g. the service port name.
	Name string
	// BatchSize is the number of datagrams per recvmmsg/sendmmsg; 0 means
	// DefaultBatchSize, 1 turns batching off (benchmarks compare).
	BatchSize int
	// Logger receives the relay's log lines, with "relay" set to Name; the
	// zero value means klog.Background().
	Logger klog.Logger
	// Admit, when set, decides by the client's address whether a new flow
	// may start (loadBalancerSourceRanges); a refused client's datagrams
	// are dropped and counted. Nil admits every client.
	Admit func(client netip.Addr) bool
	// Descriptors, shared by every relay of the process, bounds the sockets
	// flows hold, in all and per client address. When a client holds its
	// share its new flows are refused; when all flows hold theirs the
	// relay's least recently active flow makes room. Nil bounds nothing
	// but MaxFlows.
	Descriptors *fdbudget.Budget
	// Dials are the outgoing sockets of every relay of the process: the
	// relay adds its flows' sockets, and drops a datagram that one of them
	// sent (reason loop), since an endpoint that leads back into kproxy
	// would otherwise make the relays open flows to themselves until the
	// budget is spent. Nil checks nothing.
	Dials *selfdial.Dials
	// KeepSource, when set, opens the flows to the endpoints it says so
	// from the client's own address (an endpoint on this node). Such a
	// flow is not in Dials: its local address is the client's, whose own
	// datagrams would then look like a loop; Keeper only keeps the
	// address for endpoints that are pods, which cannot lead back into
	// kproxy by themselves. A failure falls back to the node's address,
	// counted. Nil opens every flow from the node.
	KeepSource *keepsource.Keeper

	// Routes, when set, makes Conn a shared socket serving many service
	// addresses (socket-lookup steering delivers them to it unchanged):
	// each datagram's original destination (IP_ORIGDSTADDR /
	// IPV6_ORIGDSTADDR, which the relay enables) chooses the Route serving
	// it, flows are keyed by client and destination, and replies leave
	// with the destination as their source address and port, through
	// Replies. A datagram with no route, or sent to the socket's own
	// address, is dropped and counted (reason direct). Picker, Admit and
	// SetPicker are then unused. Routes is called from the relay's loop
	// for each datagram that starts a flow, so it must be fast and safe
	// to call while the caller changes what it returns.
	Routes func(local netip.AddrPort) (*Route, bool)
	// Replies sends a shared socket's replies; required with Routes, and
	// it needs CAP_NET_RAW (rawudp.Open). Several relays may share it; the
	// relay does not close it.
	Replies *rawudp.Socket
}

// Route is one service address and port of a shared socket.
type Route struct {
	// Name identifies the service port in logs and in CloseRouteFlowsTo.
	Name string
	// Picker chooses the endpoint of each new flow to this address.
	Picker lb.Picker
	// Admit, when set, decides by the client's address whether a new flow
	// may start (loadBalancerSourceRanges); nil admits every client.
	Admit func(client netip.Addr) bool
	// Metrics count the route's flows from the moment the route is known
	// (refusals, dials, flows, bytes), so that a shared socket's service
	// ports are counted apart: the service port's, as
	// lbmetrics.Metrics.WithPort(ProtocolUDP, ...) makes them. Nil counts
	// into the relay's own. Datagrams not through a portal, from kproxy
	// itself or with no way back (ReasonDirect, ReasonLoop) and
	// evictions, which close one flow for another's sake, count in the
	// relay's.
	Metrics *lbmetrics.Metrics
}

// shared is what a relay on a shared socket needs beyond a per-socket one.
type shared struct {
	routes  func(local netip.AddrPort) (*Route, bool)
	replies *rawudp.Socket
	own     netip.AddrPort // the socket's own address, never a service's
}

// Relay is a running UDP relay for one proxy socket. Its methods are safe to
// call from any goroutine.
type Relay struct {
	name    string
	log     klog.Logger
	conn    *net.UDPConn
	proxyFD int // a dup of conn's descriptor, owned by the relay
	// poll holds the proxy socket and every upstream socket; its Wake
	// brings Close, context cancellation and CloseFlowsTo to the loop.
	poll     *eventloop.Poller
	idle     int64
	maxFlows int
	epoch    time.Time
	picker   atomic.Pointer[pickerBox]
	admit    func(netip.Addr) bool
	budget   *fdbudget.Budget
	dials    *selfdial.Dials
	keep     *keepsource.Keeper

	// metrics are flowMetrics' UDP handles; flows of a shared socket's
	// route with metrics of its own count there instead.
	metrics     *lbmetrics.Protocol
	flowMetrics *lbmetrics.Metrics
	evictions   prometheus.Counter

	flowsNow atomic.Int64 // mirrors flows.len() for FlowCount
	buffered atomic.Bool  // mirrors in.allocated() for HoldsBuffers

	// shared is set for a shared socket (Config.Routes), nil otherwise.
	shared *shared

	mu       sync.Mutex
	serving  bool
	closed   bool
	stop     bool
	dropTo   []closeRequest // flows the loop must close
	loopDone chan struct{}

	// Owned by the event loop.
	flows   *flowTable
	in, out batch
	// lastRead is when client datagrams last arrived (relay clock); an
	// idle relay gives its buffers back after IdleTimeout without any.
	lastRead int64
}

type pickerBox struct{ lb.Picker }

// closeRequest names flows to close: those to endpoint of one route (a
// zero endpoint: all of the route's), or of any route.
type closeRequest struct {
	route    string
	anyRoute bool
	endpoint netip.AddrPort
}

// batch is a set of mmsghdrs with their buffers and addresses, reused for
// every recvmmsg or sendmmsg. It exists only while the relay has traffic
// (the buffers alone are BufferSize each, a megabyte per batch): memory
// follows traffic, not the number of configured ports.
type batch struct {
	size     int
	control  bool // in of a shared socket: read each datagram's destination
	hdrs     []eventloop.Mmsghdr
	iovs     []unix.Iovec
	names    []eventloop.Sockaddr
	controls [][controlSize]byte
	bufs     [][]byte
	flows    []*flow // out only: which flow each reply belongs to
	n        int
}

func newBatch(size int, control bool) batch { return batch{size: size, control: control} }

// allocate builds the batch if it is not built.
func (b *batch) allocate() {
	if b.allocated() {
		return
	}
	b.hdrs = make([]eventloop.Mmsghdr, b.size)
	b.iovs = make([]unix.Iovec, b.size)
	b.names = make([]eventloop.Sockaddr, b.size)
	b.bufs = make([][]byte, b.size)
	b.flows = make([]*flow, b.size)
	if b.control {
		b.controls = make([][controlSize]byte, b.size)
	}
	for i := range b.size {
		b.bufs[i] = make([]byte, BufferSize)
		b.iovs[i].Base = &b.bufs[i][0]
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.Iovlen = 1
	}
}

// release drops the batch, which must hold no queued reply; the next
// allocate builds a new one.
func (b *batch) release() { *b = newBatch(b.size, b.control) }

func (b *batch) allocated() bool { return b.hdrs != nil }

// payload is the i-th datagram received.
func (b *batch) payload(i int) []byte { return b.bufs[i][:b.hdrs[i].Len] }

// New prepares a relay on cfg.Conn; Serve runs it.
func New(cfg Config) (*Relay, error) {
	if cfg.Conn == nil {
		return nil, errors.New("udp relay: no proxy socket")
	}
	if cfg.Routes == nil && cfg.Picker == nil {
		return nil, errors.New("udp relay: no picker")
	}
	if cfg.Routes != nil && cfg.Replies == nil {
		return nil, errors.New("udp relay: a shared socket needs a reply socket")
	}
	if cfg.IdleTimeout < 0 || cfg.MaxFlows < 0 || cfg.BatchSize < 0 {
		return nil, fmt.Errorf("udp relay %s: negative idle timeout, flow bound or batch size", cfg.Name)
	}
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)
	cfg.MaxFlows = cmp.Or(cfg.MaxFlows, DefaultMaxFlows)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	m := cfg.Metrics
	if m == nil {
		m = lbmetrics.Discard()
	}
	log := cfg.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	r := &Relay{
		name:        cfg.Name,
		log:         log.WithValues("relay", cfg.Name),
		conn:        cfg.Conn,
		proxyFD:     -1,
		idle:        int64(cfg.IdleTimeout),
		maxFlows:    cfg.MaxFlows,
		epoch:       time.Now(),
		admit:       cfg.Admit,
		budget:      cfg.Descriptors,
		dials:       cfg.Dials,
		keep:        cfg.KeepSource,
		metrics:     m.For(lbmetrics.ProtocolUDP),
		flowMetrics: m,
		evictions:   m.UDPFlowEvictionsTotal,
		loopDone:    make(chan struct{}),
		flows:       newFlowTable(),
		in:          newBatch(cfg.BatchSize, cfg.Routes != nil),
		out:         newBatch(cfg.BatchSize, false),
	}
	if cfg.Routes != nil {
		r.shared = &shared{routes: cfg.Routes, replies: cfg.Replies, own: r.Addr()}
	}
	r.picker.Store(&pickerBox{cfg.Picker})
	if err := r.openFDs(); err != nil {
		r.closeFDs()
		return nil, fmt.Errorf("udp relay %s: %w", cfg.Name, err)
	}
	return r, nil
}

// receiveDestinations makes the shared socket report each datagram's
// original destination. An IPv6 socket also asks for IPv4's, which a
// dual-stack socket reports for its IPv4 clients (a v6-only one refuses).
func (r *Relay) receiveDestinations() error {
	if r.shared.own.Addr().Is4() {
		if err := unix.SetsockoptInt(r.proxyFD, unix.SOL_IP, unix.IP_RECVORIGDSTADDR, 1); err != nil {
			return fmt.Errorf("enabling IP_RECVORIGDSTADDR: %w", err)
		}
		return nil
	}
	if err := unix.SetsockoptInt(r.proxyFD, unix.SOL_IPV6, unix.IPV6_RECVORIGDSTADDR, 1); err != nil {
		return fmt.Errorf("enabling IPV6_RECVORIGDSTADDR: %w", err)
	}
	_ = unix.SetsockoptInt(r.proxyFD, unix.SOL_IP, unix.IP_RECVORIGDSTADDR, 1)
	return nil
}

func (r *Relay) openFDs() error {
	// The loop uses its own descriptor so the socket stays valid until the
	// loop is done with it, whoever closes Conn.
	var err error
	if r.proxyFD, err = eventloop.Dup(r.conn); err != nil {
		r.proxyFD = -1
		return fmt.Errorf("proxy socket: %w", err)
	}
	if r.shared != nil {
		if err := r.receiveDestinations(); err != nil {
			return fmt.Errorf("shared socket: %w", err)
		}
	}
	if r.poll, err = eventloop.New("udp-relay-epoll", maxEvents); err != nil {
		return err
	}
	if err := r.poll.Add(r.proxyFD, unix.EPOLLIN, 0); err != nil {
		return fmt.Errorf("watching the proxy socket: %w", err)
	}
	return nil
}

// closeFDs closes the epoll set and the relay's proxy descriptor; r.poll
// stays set, so a late wake-up finds a closed poller, which ignores it.
func (r *Relay) closeFDs() {
	if r.poll != nil {
		r.poll.Close()
	}
	if r.proxyFD >= 0 {
		unix.Close(r.proxyFD)
		r.proxyFD = -1
	}
}

// SetPicker replaces the picker for new flows; existing flows keep their
// endpoint until they expire (CloseFlowsTo ends them sooner). A shared
// socket's pickers are its Routes'.
func (r *Relay) SetPicker(p lb.Picker) {
	if p != nil {
		r.picker.Store(&pickerBox{p})
	}
}

// CloseFlowsTo closes every flow to endpoint, so its clients' next datagrams
// pick again; call it when an endpoint goes away.
func (r *Relay) CloseFlowsTo(endpoint netip.AddrPort) {
	r.requestClose(closeRequest{anyRoute: true, endpoint: endpoint})
}

// CloseRouteFlowsTo closes the flows of the shared socket's route named
// route to endpoint, leaving other routes' flows to the same endpoint; a
// zero endpoint closes every flow of the route (the route went away).
func (r *Relay) CloseRouteFlowsTo(route string, endpoint netip.AddrPort) {
	r.requestClose(closeRequest{route: route, endpoint: endpoint})
}

func (r *Relay) requestClose(req closeRequest) {
	r.mu.Lock()
	r.dropTo = append(r.dropTo, req)
	r.mu.Unlock()
	r.poll.Wake()
}

// HoldsBuffers reports whether the relay holds its datagram buffers, as it
// does from the first client datagram until it has been idle for
// IdleTimeout with no flow.
func (r *Relay) HoldsBuffers() bool { return r.buffered.Load() }

// FlowCount returns the number of flows in the table.
func (r *Relay) FlowCount() int { return int(r.flowsNow.Load()) }

// Addr returns the proxy socket's address.
func (r *Relay) Addr() netip.AddrPort { return r.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// Serve relays until ctx is cancelled or Close is called, then closes every
// flow. It returns nil on a requested stop; it may be called once.
func (r *Relay) Serve(ctx context.Context) error {
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return net.ErrClosed
	case r.serving:
		r.mu.Unlock()
		return fmt.Errorf("udp relay %s: Serve called twice", r.name)
	}
	r.serving = true
	r.mu.Unlock()
	defer close(r.loopDone)

	// AfterFunc rather than a watching goroutine: an idle relay then costs
	// one goroutine's stack, not two.
	stopWatch := context.AfterFunc(ctx, r.requestStop)
	defer stopWatch()
	err := r.loop()
	r.closeAllFlows()
	return err
}

// Close stops Serve, closes every flow and the proxy socket.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	serving := r.serving
	r.mu.Unlock()
	r.requestStop()
	if serving {
		<-r.loopDone
	}
	r.mu.Lock()
	r.closeFDs()
	r.mu.Unlock()
	if err := r.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("udp relay %s: closing proxy socket: %w", r.name, err)
	}
	return nil
}

func (r *Relay) requestStop() {
	r.mu.Lock()
	r.stop = true
	r.mu.Unlock()
	r.poll.Wake()
}

// now is the relay's monotonic clock in nanoseconds.
func (r *Relay) now() int64 { return int64(time.Since(r.epoch)) }

func (r *Relay) loop() error {
	for {
		var deadline time.Time
		if f := r.flows.oldest(); f != nil {
			deadline = r.epoch.Add(time.Duration(f.lastActive + r.idle))
		} else if r.in.allocated() {
			deadline = r.epoch.Add(time.Duration(r.lastRead + r.idle))
		}
		events, err := r.poll.Wait(deadline, false)
		if err != nil {
			return fmt.Errorf("udp relay %s: waiting for events: %w", r.name, err)
		}
		if r.poll.Woken() && r.handleWake() {
			return nil
		}
		now := r.now()
		for _, ev := range events {
			if int(ev.Fd) == r.proxyFD {
				r.readClients(now)
			} else if f := r.flows.byFD[ev.Fd]; f != nil {
				r.readEndpoint(f, now)
			}
		}
		r.flushReplies()
		r.expire(now)
		r.releaseIdleBuffers(now)
	}
}

// releaseIdleBuffers gives the batches' buffers back once the relay has
// had no flow and no client datagram for IdleTimeout.
func (r *Relay) releaseIdleBuffers(now int64) {
	if r.flows.len() == 0 && r.in.allocated() && now-r.lastRead >= r.idle {
		r.in.release()
		r.out.release()
		r.buffered.Store(false)
	}
}

// handleWake serves requests from other goroutines; it reports whether the
// loop must stop.
func (r *Relay) handleWake() bool {
	r.mu.Lock()
	stop, dropTo := r.stop, r.dropTo
	r.dropTo = nil
	r.mu.Unlock()
	if stop {
		return true
	}
	if len(dropTo) == 0 {
		return false
	}
	// One pass over the flows, however many requests came.
	requested := make(map[closeRequest]struct{}, len(dropTo))
	for _, req := range dropTo {
		requested[req] = struct{}{}
	}
	closes := func(f *flow) bool {
		for _, req := range [...]closeRequest{
			{anyRoute: true, endpoint: f.endpoint}, {route: f.route, endpoint: f.endpoint}, {route: f.route},
		} {
			if _, ok := requested[req]; ok {
				return true
			}
		}
		return false
	}
	for f := r.flows.oldest(); f != nil && f != &r.flows.head; {
		next := f.next
		if closes(f) {
			r.closeFlow(f)
		}
		f = next
	}
	return false
}

// readClients moves one batch of client datagrams to their endpoints.
func (r *Relay) readClients(now int64) {
	if r.shared != nil {
		r.readSharedClients(now)
		return
	}
	b, n := r.receiveClients(now)
	var relayed int
	for i := range n {
		client, err := b.names[i].AddrPort()
		if err != nil {
			continue
		}
		f := r.flows.byClient[client]
		if f == nil {
			if f = r.newFlow(client, &b.names[i], netip.AddrPort{}, nil, now); f == nil {
				continue
			}
		}
		// forward, written out: this is the per-socket relay's hot loop.
		r.flows.touch(f, now)
		payload := b.payload(i)
		if _, err := eventloop.Send(f.fd, payload, unix.MSG_DONTWAIT); err != nil {
			r.sendFailed(f, err)
			continue
		}
		relayed += len(payload)
	}
	countToEndpoint(r.metrics, relayed)
}

// readSharedClients is readClients for a shared socket. Bytes are counted
// once per run of datagrams whose flows count into the same metrics, as a
// batch of one service port's is counted once.
func (r *Relay) readSharedClients(now int64) {
	b, n := r.receiveClients(now)
	var relayed int
	var to *lbmetrics.Protocol
	for i := range n {
		f := r.sharedFlow(b, i, now)
		if f == nil {
			continue
		}
		if f.metrics != to {
			countToEndpoint(to, relayed)
			to, relayed = f.metrics, 0
		}
		relayed += r.forward(f, b.payload(i), now)
	}
	countToEndpoint(to, relayed)
}

// sharedFlow returns the flow of the i-th datagram of a shared socket's
// batch, its client's to its original destination, starting it if need
// be; nil drops the datagram.
func (r *Relay) sharedFlow(b *batch, i int, now int64) *flow {
	client, err := b.names[i].AddrPort()
	if err != nil {
		return nil
	}
	service, ok := originalDestination(b.controls[i][:b.hdrs[i].Hdr.Controllen])
	if !ok {
		r.metrics.RejectedDirect.Inc()
		return nil
	}
	if f := r.flows.byService[serviceKey{client, service}]; f != nil {
		return f
	}
	return r.newSharedFlow(client, &b.names[i], service, now)
}

// receiveClients reads a batch of client datagrams into the client batch
// and returns it with how many arrived (0 when none did), each with its
// sender's address in names.
func (r *Relay) receiveClients(now int64) (*batch, int) {
	b := r.prepareClientBatch(now)
	n, err := eventloop.Recvmmsg(r.proxyFD, b.hdrs)
	if err != nil {
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			r.log.V(4).Info("UDP relay read failed", "err", err)
		}
		return b, 0
	}
	for i := range n {
		b.names[i].Len = b.hdrs[i].Hdr.Namelen
	}
	return b, n
}

// prepareClientBatch readies the client batch for recvmmsg.
func (r *Relay) prepareClientBatch(now int64) *batch {
	b := &r.in
	if !b.allocated() {
		b.allocate()
		r.out.allocate()
		r.buffered.Store(true)
	}
	r.lastRead = now
	for i := range b.hdrs {
		b.iovs[i].Len = BufferSize
		b.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.names[i].Raw))
		b.hdrs[i].Hdr.Namelen = uint32(unsafe.Sizeof(b.names[i].Raw))
		b.hdrs[i].Hdr.Flags = 0
		if b.control {
			b.hdrs[i].Hdr.Control = &b.controls[i][0]
			b.hdrs[i].Hdr.SetControllen(controlSize)
		}
	}
	return b
}

// countToEndpoint counts into m the bytes a batch relayed to endpoints.
func countToEndpoint(m *lbmetrics.Protocol, relayed int) {
	if relayed > 0 {
		m.BytesToEndpoint.Add(float64(relayed))
	}
}

// forward sends one client datagram to f's endpoint and returns the bytes
// relayed.
func (r *Relay) forward(f *flow, payload []byte, now int64) int {
	r.flows.touch(f, now)
	if _, err := eventloop.Send(f.fd, payload, unix.MSG_DONTWAIT); err != nil {
		r.sendFailed(f, err)
		return 0
	}
	return len(payload)
}

// newSharedFlow starts the flow of client to service on a shared socket,
// if service is routed; it returns nil, counted, otherwise.
func (r *Relay) newSharedFlow(client netip.AddrPort, name *eventloop.Sockaddr, service netip.AddrPort, now int64) *flow {
	sh := r.shared
	if service == sh.own {
		r.metrics.RejectedDirect.Inc()
		return nil
	}
	route, ok := sh.routes(service)
	if !ok || route == nil || route.Picker == nil {
		r.metrics.RejectedDirect.Inc()
		return nil
	}
	return r.newFlow(client, name, service, route, now)
}

// sendFailed handles an error writing to an endpoint: a refusal (the ICMP
// port-unreachable of an earlier datagram) ends the flow; a full socket
// buffer drops the datagram, as the kernel would.
func (r *Relay) sendFailed(f *flow, err error) {
	if endpointFailed(err) {
		r.endpointRefused(f)
		return
	}
	r.log.V(5).Info("UDP datagram to endpoint dropped", "endpoint", f.endpoint, "err", err)
}

// endpointFailed tells errors that mean the endpoint is gone (an ICMP
// error for an earlier datagram, reported on the connected socket) from
// transient ones (full buffers, signals).
func endpointFailed(err error) bool {
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR),
		errors.Is(err, unix.ENOBUFS), errors.Is(err, unix.ENOMEM):
		return false
	}
	return true
}

func (r *Relay) endpointRefused(f *flow) {
	r.log.V(4).Info("UDP endpoint refused, closing flow", "client", f.client, "endpoint", f.endpoint)
	f.metrics.DialFailures.Inc()
	f.picker.Failed(f.client.Addr().Unmap(), f.endpoint)
	r.closeFlow(f)
}

// newFlow picks an endpoint for client and connects a socket to it. It
// returns nil, counted, when there is no endpoint or none can be connected.
// On a shared socket route serves service; otherwise both are zero and the
// relay's own picker and Admit serve.
func (r *Relay) newFlow(client netip.AddrPort, name *eventloop.Sockaddr, service netip.AddrPort, route *Route, now int64) *flow {
	clientIP := client.Addr().Unmap()
	routeName, admit := r.name, r.admit
	if route != nil {
		routeName, admit = route.Name, route.Admit
	}
	if dial, ok := r.dials.ReturningFlow(client); ok {
		r.metrics.RejectedLoop.Inc()
		if r.dials.FirstLoop(dial.From, time.Now()) {
			r.log.Info("Dropping datagrams from kproxy itself: an endpoint of a service port leads back into kproxy, "+
				"so its datagrams go nowhere (logged once per service port)",
				"servicePort", dial.From, "endpoint", dial.Endpoint, "from", client)
		}
		return nil
	}
	metrics, flowMetrics := r.metrics, r.flowMetrics
	if route != nil && route.Metrics != nil {
		// Once per new flow; a service port's metrics (WithPort) hand
		// their UDP handles over without a lookup.
		flowMetrics = route.Metrics
		metrics = flowMetrics.For(lbmetrics.ProtocolUDP)
	}
	if admit != nil && !admit(clientIP) {
		metrics.RejectedSourceRange.Inc()
		return nil
	}
	var picker lb.Picker
	if route != nil {
		picker = route.Picker
	} else {
		picker = r.picker.Load().Picker
	}
	var reply rawudp.Path
	if route != nil {
		var err error
		if reply, err = rawudp.NewPath(service, client); err != nil {
			r.log.V(4).Info("UDP datagram dropped: no reply path", "client", client, "service", service, "err", err)
			r.metrics.RejectedDirect.Inc()
			return nil
		}
	}
	candidates := picker.Pick(clientIP)
	if len(candidates) == 0 {
		metrics.RejectedNoEndpoints.Inc()
		return nil
	}
	if r.flows.len() >= r.maxFlows {
		r.evict(r.flows.oldest())
	}
	if !r.acquireDescriptor(client, metrics) {
		return nil
	}
	for _, ep := range candidates {
		fd, keptFlow, keepErr, err := dialUDP(ep, r.keep, lb.KeepsSource(picker), clientIP)
		if keepErr != nil {
			metrics.KeepSourceFailures.Inc()
			r.log.V(2).Info("Cannot open a UDP flow from the client's address; opening it from the node's",
				"client", client, "endpoint", ep, "err", keepErr)
		}
		if err != nil {
			r.log.V(4).Info("UDP endpoint unusable", "endpoint", ep, "err", err)
			metrics.DialFailures.Inc()
			picker.Failed(clientIP, ep)
			continue
		}
		if err := r.poll.Add(fd, unix.EPOLLIN, 0); err != nil {
			eventloop.Close(fd)
			_ = r.keep.Release(keptFlow)
			r.log.Error(err, "Cannot watch UDP upstream socket", "endpoint", ep)
			continue
		}
		var f *flow
		if route == nil {
			f = &flow{client: client, clientName: *name, endpoint: ep, picker: picker, fd: fd, lastActive: now}
		} else {
			// One allocation for the flow and its reply path.
			sf := &sharedFlow{flow: flow{client: client, endpoint: ep, picker: picker, fd: fd, lastActive: now,
				service: service, route: route.Name}, path: reply}
			f = &sf.flow
			f.reply = &sf.path
		}
		f.kept, f.metrics, f.flowMetrics = keptFlow, metrics, flowMetrics
		if keptFlow.IsValid() {
			metrics.KeptSource.Inc()
		} else if r.dials != nil {
			if local, err := localAddr(fd); err == nil {
				f.local = local
				r.dials.AddFlow(local, selfdial.Dial{From: routeName, Endpoint: ep})
			}
		}
		r.flows.add(f)
		r.flowsNow.Add(1)
		flowMetrics.UDPFlowsActive.Inc()
		flowMetrics.UDPFlowsTotal.Inc()
		picker.Connected(clientIP, ep)
		return f
	}
	r.budget.Release(clientIP)
	metrics.RejectedDialFailed.Inc()
	return nil
}

// evict closes f, if there is one, to make room for a new flow, and says
// whether it did.
func (r *Relay) evict(f *flow) bool {
	if f == nil {
		return false
	}
	r.closeFlow(f)
	r.evictions.Inc()
	return true
}

// acquireDescriptor takes the new flow's socket out of the shared budget.
// A client at its share gives up its own least recently active flow in this
// relay, so a busy client (a node's DNS cache, a fresh source port per
// query) keeps being served without taking more; it is refused when its
// flows are all in other relays. When the flows' share is used up, the
// relay's least recently active flow of any client makes room. A refusal
// counts into m, the new flow's metrics.
func (r *Relay) acquireDescriptor(client netip.AddrPort, m *lbmetrics.Protocol) bool {
	addr := client.Addr().Unmap()
	verdict := r.budget.Acquire(addr)
	var victim *flow
	switch verdict {
	case fdbudget.ClientFull:
		victim = r.flows.oldestOf(addr)
	case fdbudget.Full:
		victim = r.flows.oldest()
	}
	if r.evict(victim) {
		verdict = r.budget.Acquire(addr)
	}
	if verdict != fdbudget.Granted {
		r.log.V(4).Info("UDP flow refused", "client", client, "reason", verdict)
		m.RejectedFDExhausted.Inc()
		return false
	}
	return true
}

// readEndpoint queues the replies waiting on f's upstream socket, reading
// them with recvmmsg: a short count tells the socket is drained without
// the extra read that would return EAGAIN.
func (r *Relay) readEndpoint(f *flow, now int64) {
	b := &r.out
	b.allocate() // a flow exists, so it has them: cheap insurance
	for read := 0; read < maxReadsPerEvent; {
		if b.n == len(b.hdrs) {
			r.flushReplies()
		}
		want := min(len(b.hdrs)-b.n, maxReadsPerEvent-read)
		for i := b.n; i < b.n+want; i++ {
			b.iovs[i].Len = BufferSize
			b.hdrs[i].Hdr.Name = nil
			b.hdrs[i].Hdr.Namelen = 0
			b.hdrs[i].Hdr.Flags = 0
		}
		if f.reply != nil {
			// Room for the UDP header the raw socket sends before it.
			for i := b.n; i < b.n+want; i++ {
				b.iovs[i].Base = &b.bufs[i][rawudp.HeaderLen]
				b.iovs[i].Len = BufferSize - rawudp.HeaderLen
				b.hdrs[i].Hdr.Control = nil
				b.hdrs[i].Hdr.Controllen = 0
			}
		}
		got, err := eventloop.Recvmmsg(f.fd, b.hdrs[b.n:b.n+want])
		if err != nil {
			if endpointFailed(err) {
				r.endpointRefused(f)
			}
			return // EAGAIN: drained
		}
		if f.reply != nil {
			for i := b.n; i < b.n+got; i++ {
				dgram := b.bufs[i][:rawudp.HeaderLen+int(b.hdrs[i].Len)]
				f.reply.WriteHeader(dgram)
				b.iovs[i].Base = &dgram[0]
				b.iovs[i].Len = uint64(len(dgram))
				f.reply.Address(&b.hdrs[i].Hdr)
				b.flows[i] = f
			}
		} else {
			for i := b.n; i < b.n+got; i++ {
				b.iovs[i].Len = uint64(b.hdrs[i].Len)
				b.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&f.clientName.Raw))
				b.hdrs[i].Hdr.Namelen = f.clientName.Len
				b.flows[i] = f
			}
		}
		b.n += got
		read += got
		if got > 0 {
			r.flows.touch(f, now)
		}
		if got < want {
			return // drained
		}
	}
}

// flushReplies sends the queued replies to their clients from the proxy
// socket, or a shared socket's through the raw reply sockets. A full send
// buffer drops the rest, as the kernel would.
func (r *Relay) flushReplies() {
	b := &r.out
	// Bytes are counted once per run of replies whose flows count into the
	// same metrics: once per flush, unless a shared socket's service ports
	// take turns.
	var sentBytes uint64
	var to *lbmetrics.Protocol
	var header uint64 // the part of each message that is not payload
	if r.shared != nil {
		header = rawudp.HeaderLen
	}
	for start := 0; start < b.n; {
		fd, end := r.proxyFD, b.n
		if sh := r.shared; sh != nil {
			// One sendmmsg per run of one family's replies.
			fd = sh.replies.FD(b.flows[start].reply)
			for end = start + 1; end < b.n && sh.replies.FD(b.flows[end].reply) == fd; end++ {
			}
			if fd < 0 {
				r.log.V(5).Info("UDP replies dropped: no raw socket for their family", "dropped", end-start)
				start = end
				continue
			}
		}
		sent, err := eventloop.Sendmmsg(fd, b.hdrs[start:end])
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				r.log.V(5).Info("UDP replies dropped: send buffer full", "dropped", b.n-start)
				break
			}
			// The first message failed on its own (e.g. its client's
			// route vanished): skip it.
			r.log.V(5).Info("UDP reply dropped", "client", b.flows[start].client, "err", err)
			start++
			continue
		}
		for i := start; i < start+sent; i++ {
			if m := b.flows[i].metrics; m != to {
				countToClient(to, sentBytes)
				to, sentBytes = m, 0
			}
			sentBytes += b.iovs[i].Len - header
		}
		start += sent
	}
	for i := range b.n {
		b.flows[i] = nil
	}
	b.n = 0
	countToClient(to, sentBytes)
}

// countToClient counts into m the bytes of replies sent to clients.
func countToClient(m *lbmetrics.Protocol, sent uint64) {
	if sent > 0 {
		m.BytesToClient.Add(float64(sent))
	}
}

// expire closes flows idle for IdleTimeout, oldest first.
func (r *Relay) expire(now int64) {
	for f := r.flows.oldest(); f != nil && now-f.lastActive >= r.idle; f = r.flows.oldest() {
		r.log.V(5).Info("UDP flow expired", "client", f.client, "endpoint", f.endpoint)
		r.closeFlow(f)
	}
}

func (r *Relay) closeFlow(f *flow) {
	r.flows.remove(f)
	r.dials.RemoveFlow(f.local) // before the port can be reused
	_ = r.poll.Del(f.fd)
	eventloop.Close(f.fd)
	if f.kept.IsValid() {
		if err := r.keep.Release(f.kept); err != nil {
			r.log.Error(err, "Cannot remove the steering of a closed UDP flow's replies", "flow", f.kept)
		}
	}
	r.budget.Release(f.client.Addr().Unmap())
	r.flowsNow.Add(-1)
	f.flowMetrics.UDPFlowsActive.Dec()
}

func (r *Relay) closeAllFlows() {
	for f := r.flows.oldest(); f != nil; f = r.flows.oldest() {
		r.closeFlow(f)
	}
}
