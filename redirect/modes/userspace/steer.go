package userspace

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/rawudp"
	"kproxy.dev/kproxy/lb/tcprelay"
	"kproxy.dev/kproxy/lb/udprelay"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/redirect/sklookup"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
)

// steering is what socket-lookup portals share: the program attached to the
// node's network namespace, one relay socket per protocol and family, and
// the routes by which those relays tell services apart (a connection's or
// datagram's local address is the service address it was sent to).
//
// Why one socket per protocol rather than per service port: nothing else
// can bind a service port first (the program picks kproxy's socket before
// the kernel looks for any other), a service change is a map update with no
// bind, and descriptors grow with connections, not with services.
type steering struct {
	program *sklookup.Steering
	tcp     []*tcprelay.Proxy
	udp     map[ipfamily.Family]*udprelay.Relay
	// replies send the UDP relays' replies from the service addresses and
	// ports (lb/rawudp).
	replies *rawudp.Socket
	// The routes, replaced whole at each sync and read lock-free by the
	// relays for every new connection or flow.
	tcpRoutes atomic.Pointer[map[netip.AddrPort]*tcprelay.Route]
	udpRoutes atomic.Pointer[map[netip.AddrPort]*udprelay.Route]
	// discarding are the sockets that take a Local policy's clients while
	// the node has no local endpoint, and drop them (setDropAll).
	discarding []io.Closer
	// targets and guarded are what the program was last given in full.
	targets map[sklookup.Target]sklookup.Action
	guarded []netip.Addr
}

// nodeNetns is the network namespace the program steers: the calling
// thread's, with the thread locked. Not /proc/self/ns/net, the main
// thread's: the kernel probe's throwaway namespace (kernel.ThreadSandbox)
// may have been made on the main thread, which Go then parks there for good
// instead of ending it.
const nodeNetns = "/proc/thread-self/ns/net"

// startSteering attaches the program and opens the shared sockets of the
// socket-lookup families, serving them until m.ctx ends.
func (m *Mode) startSteering(fams []ipfamily.Family) (err error) {
	st := &steering{udp: map[ipfamily.Family]*udprelay.Relay{}}
	st.tcpRoutes.Store(&map[netip.AddrPort]*tcprelay.Route{})
	st.udpRoutes.Store(&map[netip.AddrPort]*udprelay.Route{})
	runtime.LockOSThread()
	st.program, err = sklookup.Attach(nodeNetns)
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("socket-lookup portals: %w", err)
	}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	for _, fam := range fams {
		err := m.openShared(st, fam)
		if fam == ipfamily.IPv6 && (errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT)) {
			// A node with IPv6 turned off (no ::1): IPv4 alone is served.
			m.logger.Info("Not proxying this IP family: its loopback address is unavailable", "family", fam, "err", err)
			m.dropFamily(fam)
			continue
		}
		if err != nil {
			return fmt.Errorf("socket-lookup portals: %w", err)
		}
	}
	m.steering = st
	return nil
}

// openShared opens fam's shared and discarding sockets and starts their
// relays.
func (m *Mode) openShared(st *steering, fam ipfamily.Family) error {
	if err := m.openSharedTCP(st, fam); err != nil {
		return fmt.Errorf("%s TCP socket: %w", fam, err)
	}
	if err := m.openSharedUDP(st, fam); err != nil {
		return fmt.Errorf("%s UDP socket: %w", fam, err)
	}
	if err := m.openDiscarding(st, fam); err != nil {
		return fmt.Errorf("%s discarding sockets: %w", fam, err)
	}
	return nil
}

// sharedAddress is where a family's shared sockets are bound: loopback, on
// a port the kernel picks. Nobody needs to reach them there; a client that
// does anyway has no route and is refused.
func sharedAddress(fam ipfamily.Family) netip.AddrPort {
	if fam == ipfamily.IPv6 {
		return netip.AddrPortFrom(netip.IPv6Loopback(), 0)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
}

func (m *Mode) openSharedTCP(st *steering, fam ipfamily.Family) error {
	ap := sharedAddress(fam)
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false) // a SOCKMAP refuses MPTCP sockets
	ln, err := lc.Listen(m.ctx, networkOf("tcp", ap), ap.String())
	if err != nil {
		return err
	}
	if err := st.program.SetSocket(sklookup.SlotFor(sklookup.TCP, ap.Addr()), ln.(*net.TCPListener)); err != nil {
		ln.Close()
		return err
	}
	p, err := tcprelay.New(tcprelay.Config{Listener: ln, Direct: true, Metrics: m.metrics, Logger: m.logger,
		Name: "socket-lookup " + string(fam) + " TCP", Dials: m.dials,
		Routes: func(local netip.AddrPort) (*tcprelay.Route, bool) {
			r, ok := (*st.tcpRoutes.Load())[local]
			return r, ok
		}})
	if err != nil {
		ln.Close()
		return err
	}
	st.tcp = append(st.tcp, p)
	m.serve(func() { _ = p.Serve(m.ctx) })
	return nil
}

func (m *Mode) openSharedUDP(st *steering, fam ipfamily.Family) error {
	ap := sharedAddress(fam)
	c, err := net.ListenUDP(networkOf("udp", ap), net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return err
	}
	if err := st.program.SetSocket(sklookup.SlotFor(sklookup.UDP, ap.Addr()), c); err != nil {
		c.Close()
		return err
	}
	if st.replies == nil {
		if st.replies, err = rawudp.Open(); err != nil {
			c.Close()
			return fmt.Errorf("opening the raw sockets replies leave by: %w", err)
		}
	}
	// One relay holds every service's flows of the family: its own bound
	// is the descriptor budget's, which bounds them all anyway.
	flows, _ := m.descriptors.Limits()
	r, err := udprelay.New(udprelay.Config{Conn: c, Replies: st.replies, IdleTimeout: m.cfg.UDPIdleTimeout,
		MaxFlows: max(flows, udprelay.DefaultMaxFlows),
		Metrics:  m.metrics, Logger: m.logger, Name: "socket-lookup " + string(fam) + " UDP",
		Descriptors: m.descriptors, Dials: m.dials,
		Routes: func(local netip.AddrPort) (*udprelay.Route, bool) {
			r, ok := (*st.udpRoutes.Load())[local]
			return r, ok
		}})
	if err != nil {
		c.Close()
		return err
	}
	st.udp[fam] = r
	m.serve(func() { _ = r.Serve(m.ctx) })
	return nil
}

// openDiscarding opens fam's discarding sockets: a listener and a UDP
// socket whose filters drop everything, so a SYN is never answered and a
// datagram never queued.
func (m *Mode) openDiscarding(st *steering, fam ipfamily.Family) error {
	ap := sharedAddress(fam)
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(m.ctx, networkOf("tcp", ap), ap.String())
	if err != nil {
		return err
	}
	st.discarding = append(st.discarding, ln)
	c, err := lc.ListenPacket(m.ctx, networkOf("udp", ap), ap.String())
	if err != nil {
		return err
	}
	st.discarding = append(st.discarding, c)
	for _, s := range []struct {
		slot sklookup.Slot
		conn syscall.Conn
	}{
		{sklookup.SlotFor(sklookup.TCP, ap.Addr()).Discarding(), ln.(*net.TCPListener)},
		{sklookup.SlotFor(sklookup.UDP, ap.Addr()).Discarding(), c.(*net.UDPConn)},
	} {
		raw, err := s.conn.SyscallConn()
		if err == nil {
			err = setDropAll(raw, true)
		}
		if err == nil {
			err = st.program.SetSocket(s.slot, s.conn)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// syncSteering gives the shared relays the routes of the steered relays and
// the program their addresses: a port with endpoints is steered to the
// relays; one without any is refused (the program's SK_DROP makes the
// kernel answer as it does when no socket is found: a reset, an ICMP port
// unreachable, as kube-proxy's REJECT); a Local policy without local
// endpoints goes to a socket that discards it (clients retry, as behind
// kube-proxy's DROP). guarded are the service addresses, on whose other
// ports the program refuses everything. It writes the program around
// syncRoutes: when something departed, first what the last sync steered and
// guarded besides the new, then the new alone, so the routes of departed
// services go first; else the new once, before the routes.
func (m *Mode) syncSteering(guarded []netip.Addr, syncRoutes func()) error {
	st := m.steering
	if st == nil {
		syncRoutes()
		return nil
	}
	tcpRoutes := map[netip.AddrPort]*tcprelay.Route{}
	udpRoutes := map[netip.AddrPort]*udprelay.Route{}
	targets := map[sklookup.Target]sklookup.Action{}
	for key, r := range m.relays {
		if !r.steered {
			continue
		}
		spec := r.spec.Load()
		state := portal.EndpointStateOf(spec.port, key.Family, r.hasEndpoints(spec.port))
		action := sklookup.Steer
		switch state {
		case portal.NoEndpoints:
			action = sklookup.Drop
		case portal.NoLocalEndpoints:
			action = sklookup.Discard
		}
		proto := sklookup.TCP
		if spec.protocol == v1.ProtocolUDP {
			proto = sklookup.UDP
		}
		rt := r.steeredRoutes(spec)
		maps.Copy(tcpRoutes, rt.tcp)
		maps.Copy(udpRoutes, rt.udp)
		for _, ap := range spec.listen {
			targets[sklookup.Target{Protocol: proto, Addr: ap}] = action
		}
	}
	withOld, departed := targets, false
	for t, a := range st.targets {
		if _, ok := targets[t]; !ok {
			if !departed {
				withOld, departed = maps.Clone(targets), true
			}
			withOld[t] = a
		}
	}
	if !departed {
		isGuarded := make(map[netip.Addr]bool, len(guarded))
		for _, a := range guarded {
			isGuarded[a] = true
		}
		departed = slices.ContainsFunc(st.guarded, func(a netip.Addr) bool { return !isGuarded[a] })
	}
	// Relay routes first: a connection steered before its route is in
	// would be refused. (A departed service's route goes at once; its
	// connections meanwhile are refused, as it has no endpoints to give
	// them.)
	st.tcpRoutes.Store(&tcpRoutes)
	st.udpRoutes.Store(&udpRoutes)
	var errs []error
	if departed {
		if err := st.program.Sync(withOld, append(slices.Clone(guarded), st.guarded...)); err != nil {
			errs = append(errs, fmt.Errorf("socket-lookup portals: %w", err))
		}
		syncRoutes()
	}
	if err := st.program.Sync(targets, guarded); err != nil {
		errs = append(errs, fmt.Errorf("socket-lookup portals: %w", err))
	} else {
		st.targets, st.guarded = targets, guarded
	}
	if !departed {
		syncRoutes()
	}
	return errors.Join(errs...)
}

// steeredRoutes are one relay's routes in the shared relays, per listen
// address, and what they were made from.
type steeredRoutes struct {
	made   bool
	picker lb.Picker
	listen []netip.AddrPort
	tcp    map[netip.AddrPort]*tcprelay.Route
	udp    map[netip.AddrPort]*udprelay.Route
}

// steeredRoutes returns r's routes for spec, made again only when its picker
// or addresses changed: most syncs change a few service ports of many, and
// the routes are shared with the relays' loops, so never modified.
func (r *relay) steeredRoutes(spec *relaySpec) steeredRoutes {
	rt := &r.routes
	if rt.made && rt.picker == r.picker && slices.Equal(rt.listen, spec.listen) {
		return *rt
	}
	*rt = steeredRoutes{made: true, picker: r.picker, listen: spec.listen}
	name := r.key.String()
	for _, ap := range spec.listen {
		// The admission reads the relay's spec of the moment: source
		// ranges change without a new route.
		admit := func(client netip.Addr) bool { return r.spec.Load().admits(ap, client) }
		switch spec.protocol {
		case v1.ProtocolTCP:
			if rt.tcp == nil {
				rt.tcp = make(map[netip.AddrPort]*tcprelay.Route, len(spec.listen))
			}
			rt.tcp[ap] = &tcprelay.Route{Name: name, Picker: r.picker, Admit: admit, Port: r.limit}
		case v1.ProtocolUDP:
			if rt.udp == nil {
				rt.udp = make(map[netip.AddrPort]*udprelay.Route, len(spec.listen))
			}
			rt.udp[ap] = &udprelay.Route{Name: name, Picker: r.picker, Admit: admit}
		}
	}
	return *rt
}

// closeFlowsTo makes a steered relay's UDP flows to a departed endpoint
// pick again; the zero endpoint closes all its flows (a departed service).
func (st *steering) closeFlowsTo(r *relay, ep netip.AddrPort) {
	if st == nil {
		return
	}
	if u := st.udp[r.key.Family]; u != nil {
		u.CloseRouteFlowsTo(r.key.String(), ep)
	}
}

// forget ends what a departed steered relay left in the shared relays: its
// UDP flows, and its TCP connections (reset, as the relays of other portal
// kinds reset theirs: the service's endpoints are gone).
func (st *steering) forget(r *relay) {
	st.closeFlowsTo(r, netip.AddrPort{})
	for _, p := range st.tcp {
		p.ResetPort(r.limit)
	}
}

// closeRelays stops the shared relays, resetting their connections.
func (st *steering) closeRelays() error {
	var errs []error
	for _, p := range st.tcp {
		errs = append(errs, p.CloseAll())
	}
	for _, u := range st.udp {
		errs = append(errs, u.Close())
	}
	for _, c := range st.discarding {
		errs = append(errs, c.Close())
	}
	if st.replies != nil {
		errs = append(errs, st.replies.Close())
	}
	return errors.Join(errs...)
}

// detach takes the program off the namespace and frees its maps.
func (st *steering) detach() error {
	if st.program == nil {
		return nil
	}
	return st.program.Close()
}

// close stops the shared relays and detaches the program.
func (st *steering) close() error {
	return errors.Join(st.closeRelays(), st.detach())
}

// steeredFamilies lists the families running socket-lookup portals.
func (m *Mode) steeredFamilies() []ipfamily.Family {
	var out []ipfamily.Family
	for _, fam := range m.families {
		if m.kinds[fam] == mode.PortalsSKLookup {
			out = append(out, fam)
		}
	}
	return out
}

// dropFamily stops proxying fam: no relay, route or portal of it is made.
func (m *Mode) dropFamily(fam ipfamily.Family) {
	if m.portalKinds != nil {
		m.portalKinds.DeleteLabelValues(string(fam), string(m.kinds[fam]))
	}
	m.families = slices.DeleteFunc(m.families, func(f ipfamily.Family) bool { return f == fam })
	delete(m.kinds, fam)
}
