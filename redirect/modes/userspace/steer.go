package userspace

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/rawudp"
	"kproxy.dev/kproxy/lb/tcprelay"
	"kproxy.dev/kproxy/lb/udprelay"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/redirect/sklookup"
	"kproxy.dev/kproxy/sync/ipfamily"
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
	// tcp and udp are the shared relays, the serving slots' and the
	// node-only slots'.
	tcp []*tcprelay.Proxy
	udp map[ipfamily.Family][]*udprelay.Relay
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
	// nodeOnly are the node-only slots' sockets, which serve an external
	// Local policy's clients from the node (as kube-proxy short-circuits
	// them) while it has no local endpoint, and drop the others;
	// letThrough is the sources their filters let through.
	nodeOnly   []nodeOnlySocket
	letThrough []netip.Prefix
	// targets and guarded are what the program holds, as of the last
	// write that succeeded.
	targets map[sklookup.Target]sklookup.Action
	guarded map[netip.Addr]bool
	// contributions are what each steered relay put in the routes and
	// targets (nil: unknown, rebuild them all); overlapping says two relays
	// wanted one address and port, so an entry's owner is unknown and every
	// sync rebuilds.
	contributions map[balancer.Key]steeredContribution
	overlapping   bool
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
	st := &steering{udp: map[ipfamily.Family][]*udprelay.Relay{}, targets: map[sklookup.Target]sklookup.Action{},
		guarded: map[netip.Addr]bool{}}
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

// openShared opens fam's shared, node-only and discarding sockets and
// starts the relays of the first two.
func (m *Mode) openShared(st *steering, fam ipfamily.Family) error {
	tcp, udp := sklookup.SlotFor(sklookup.TCP, sharedAddress(fam).Addr()), sklookup.SlotFor(sklookup.UDP, sharedAddress(fam).Addr())
	if _, err := m.openSharedTCP(st, fam, tcp); err != nil {
		return fmt.Errorf("%s TCP socket: %w", fam, err)
	}
	if _, err := m.openSharedUDP(st, fam, udp); err != nil {
		return fmt.Errorf("%s UDP socket: %w", fam, err)
	}
	for _, open := range []func() (syscall.RawConn, error){
		func() (syscall.RawConn, error) { return m.openSharedTCP(st, fam, tcp.ServingNode()) },
		func() (syscall.RawConn, error) { return m.openSharedUDP(st, fam, udp.ServingNode()) },
	} {
		raw, err := open()
		if err != nil {
			return fmt.Errorf("%s node-only sockets: %w", fam, err)
		}
		st.nodeOnly = append(st.nodeOnly, nodeOnlySocket{raw: raw, family: fam})
	}
	if err := m.openDiscarding(st, fam); err != nil {
		return fmt.Errorf("%s discarding sockets: %w", fam, err)
	}
	return nil
}

// nodeOnlySocket is a node-only slot's socket, whose filter lets only the
// node's own clients through.
type nodeOnlySocket struct {
	raw    syscall.RawConn
	family ipfamily.Family
}

// letNodeThrough gives the node-only sockets' filters the node's clients,
// when they changed; before the first call the filters drop everything.
func (st *steering) letNodeThrough(fromNode []netip.Prefix) error {
	if st.letThrough != nil && slices.Equal(st.letThrough, fromNode) {
		return nil
	}
	var errs []error
	for _, s := range st.nodeOnly {
		if err := setDropUnless(s.raw, true, s.family, fromNode, true); err != nil {
			errs = append(errs, fmt.Errorf("%s node-only socket: %w", s.family, err))
		}
	}
	if len(errs) > 0 {
		st.letThrough = nil // try again at the next sync
		return errors.Join(errs...)
	}
	st.letThrough = slices.Clip(append([]netip.Prefix{}, fromNode...))
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

// openSharedTCP opens the listener of a TCP slot and starts its relay; a
// node-only slot's listener drops everything until letNodeThrough, which
// is given the socket returned.
func (m *Mode) openSharedTCP(st *steering, fam ipfamily.Family, slot sklookup.Slot) (syscall.RawConn, error) {
	ap := sharedAddress(fam)
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false) // a SOCKMAP refuses MPTCP sockets
	ln, err := lc.Listen(m.ctx, networkOf("tcp", ap), ap.String())
	if err != nil {
		return nil, err
	}
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err == nil && slot == slot.ServingNode() {
		err = setDropAll(raw, true)
	}
	if err == nil {
		err = st.program.SetSocket(slot, ln.(*net.TCPListener))
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	p, err := tcprelay.New(tcprelay.Config{Listener: ln, Direct: true, Metrics: m.metrics, Logger: m.logger,
		Name: "socket-lookup " + slot.String(), Dials: m.dials, KeepSource: m.kept.keeper,
		Routes: func(local netip.AddrPort) (*tcprelay.Route, bool) {
			r, ok := (*st.tcpRoutes.Load())[local]
			return r, ok
		}})
	if err != nil {
		ln.Close()
		return nil, err
	}
	st.tcp = append(st.tcp, p)
	m.serve(func() { _ = p.Serve(m.ctx) })
	return raw, nil
}

// openSharedUDP is openSharedTCP for a UDP slot.
func (m *Mode) openSharedUDP(st *steering, fam ipfamily.Family, slot sklookup.Slot) (syscall.RawConn, error) {
	ap := sharedAddress(fam)
	c, err := net.ListenUDP(networkOf("udp", ap), net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, err
	}
	raw, err := c.SyscallConn()
	if err == nil && slot == slot.ServingNode() {
		err = setDropAll(raw, true)
	}
	if err == nil {
		err = st.program.SetSocket(slot, c)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if st.replies == nil {
		if st.replies, err = rawudp.Open(); err != nil {
			c.Close()
			return nil, fmt.Errorf("opening the raw sockets replies leave by: %w", err)
		}
	}
	// One relay holds every service's flows of the family: its own bound
	// is the descriptor budget's, which bounds them all anyway.
	flows, _ := m.descriptors.Limits()
	r, err := udprelay.New(udprelay.Config{Conn: c, Replies: st.replies, IdleTimeout: m.cfg.UDPIdleTimeout,
		MaxFlows: max(flows, udprelay.DefaultMaxFlows),
		Metrics:  m.metrics, Logger: m.logger, Name: "socket-lookup " + slot.String(),
		Descriptors: m.descriptors, Dials: m.dials, KeepSource: m.kept.keeper,
		Routes: func(local netip.AddrPort) (*udprelay.Route, bool) {
			r, ok := (*st.udpRoutes.Load())[local]
			return r, ok
		}})
	if err != nil {
		c.Close()
		return nil, err
	}
	st.udp[fam] = append(st.udp[fam], r)
	m.serve(func() { _ = r.Serve(m.ctx) })
	return raw, nil
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
//
// Only the relays of touched keys are looked at, unless all is set: the
// routes and targets of the others are as the last sync left them.
func (m *Mode) syncSteering(touched []balancer.Key, all bool, syncRoutes func()) error {
	st := m.steering
	if st == nil {
		syncRoutes()
		return nil
	}
	if err := st.letNodeThrough(m.fromNode); err != nil {
		// Until a sync succeeds, the node-only sockets keep their last
		// filter (at first: drop everything).
		m.logger.Error(err, "Cannot update which clients the short-circuit of externalTrafficPolicy Local serves")
	}
	if set, del, ok := m.patchSteering(touched, all); ok && !m.addrs.rebuilt {
		return m.writeSteeringChange(set, del, syncRoutes)
	}
	targets, departedTargets := m.rebuildSteering()
	guarded := m.addrs.steered.list()
	var departedGuarded []netip.Addr
	for a := range st.guarded {
		if m.addrs.steered[a] == 0 {
			departedGuarded = append(departedGuarded, a)
		}
	}
	departed := len(departedTargets) > 0 || len(departedGuarded) > 0
	var errs []error
	if departed {
		withOld := maps.Clone(targets)
		maps.Copy(withOld, departedTargets)
		if err := st.program.Sync(withOld, append(slices.Clone(guarded), departedGuarded...)); err != nil {
			errs = append(errs, fmt.Errorf("socket-lookup portals: %w", err))
		}
		syncRoutes()
	}
	if err := st.program.Sync(targets, guarded); err != nil {
		errs = append(errs, fmt.Errorf("socket-lookup portals: %w", err))
		// What the program holds is unknown: the next sync starts over.
		st.contributions = nil
	} else {
		st.targets, st.guarded = targets, map[netip.Addr]bool{}
		for _, a := range guarded {
			st.guarded[a] = true
		}
	}
	if !departed {
		syncRoutes()
	}
	return errors.Join(errs...)
}

// writeSteeringChange writes a sync's change to the program: the targets
// set and the guarded addresses that came first, then the routes, then the
// targets and guarded addresses that went, so a departed service's address
// stays guarded until its route is gone.
func (m *Mode) writeSteeringChange(set map[sklookup.Target]sklookup.Action, del []sklookup.Target, syncRoutes func()) error {
	st, a := m.steering, &m.addrs
	var errs []error
	if len(set) > 0 || len(a.steeredCame) > 0 {
		if err := st.program.Patch(set, nil, a.steeredCame, nil); err != nil {
			errs = append(errs, fmt.Errorf("socket-lookup portals: %w", err))
		}
	}
	syncRoutes()
	if len(errs) == 0 && (len(del) > 0 || len(a.steeredWent) > 0) {
		if err := st.program.Patch(nil, del, nil, a.steeredWent); err != nil {
			errs = append(errs, fmt.Errorf("socket-lookup portals: %w", err))
		}
	}
	if len(errs) > 0 {
		// What the program holds is unknown: the next sync starts over.
		st.contributions = nil
		return errors.Join(errs...)
	}
	maps.Copy(st.targets, set)
	for _, t := range del {
		delete(st.targets, t)
	}
	for _, addr := range a.steeredCame {
		st.guarded[addr] = true
	}
	for _, addr := range a.steeredWent {
		delete(st.guarded, addr)
	}
	return nil
}

// steeredContribution is what one steered relay puts in the shared relays'
// routes and the program's targets: its routes, for each of whose listen
// addresses a target of its protocol with its action.
type steeredContribution struct {
	routes   steeredRoutes
	protocol sklookup.Protocol
	action   sklookup.Action
}

// contributionOf works out what steered relay r contributes.
func contributionOf(key balancer.Key, r *relay) steeredContribution {
	spec := r.spec.Load()
	c := steeredContribution{routes: r.steeredRoutes(spec), protocol: sklookup.TCP, action: sklookup.Steer}
	if spec.protocol == v1.ProtocolUDP {
		c.protocol = sklookup.UDP
	}
	switch portal.EndpointStateOf(spec.port, key.Family, r.hasEndpoints(spec.port)) {
	case portal.NoEndpoints:
		c.action = sklookup.Drop
	case portal.NoLocalEndpoints:
		c.action = sklookup.Discard
		if key.Class == balancer.External {
			// The node's own and its pods' clients are short-circuited.
			c.action = sklookup.ServeNode
		}
	}
	return c
}

// same says whether c and o put the same entries in the routes and targets:
// routes are made again only when they change, so the same maps mean the
// same routes.
func (c steeredContribution) same(o steeredContribution) bool {
	return c.protocol == o.protocol && c.action == o.action && slices.Equal(c.routes.listen, o.routes.listen) &&
		samePointer(c.routes.tcp, o.routes.tcp) && samePointer(c.routes.udp, o.routes.udp)
}

// samePointer says whether two maps are the same map (or both nil).
func samePointer[M ~map[K]V, K comparable, V any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// rebuildSteering makes the routes (publishing them) and the targets from
// every steered relay, and returns the targets with those the program held
// that are no longer wanted.
func (m *Mode) rebuildSteering() (targets, departed map[sklookup.Target]sklookup.Action) {
	st := m.steering
	var made steeredState
	made, st.contributions, st.overlapping = m.steeredFromAll()
	// Relay routes first: a connection steered before its route is in
	// would be refused. (A departed service's route goes at once; its
	// connections meanwhile are refused, as it has no endpoints to give
	// them.)
	st.tcpRoutes.Store(&made.tcp)
	st.udpRoutes.Store(&made.udp)
	for t, a := range st.targets {
		if _, ok := made.targets[t]; !ok {
			if departed == nil {
				departed = map[sklookup.Target]sklookup.Action{}
			}
			departed[t] = a
		}
	}
	return made.targets, departed
}

// steeredState is the routes and targets of the steered relays.
type steeredState struct {
	tcp     map[netip.AddrPort]*tcprelay.Route
	udp     map[netip.AddrPort]*udprelay.Route
	targets map[sklookup.Target]sklookup.Action
}

// steeredFromAll makes the routes and targets from every steered relay,
// with each relay's contribution; overlapping says two relays wanted one
// address and port (the last one met keeps it).
func (m *Mode) steeredFromAll() (made steeredState, contributions map[balancer.Key]steeredContribution, overlapping bool) {
	made = steeredState{tcp: map[netip.AddrPort]*tcprelay.Route{}, udp: map[netip.AddrPort]*udprelay.Route{},
		targets: map[sklookup.Target]sklookup.Action{}}
	contributions = map[balancer.Key]steeredContribution{}
	for key, r := range m.relays {
		if !r.steered {
			continue
		}
		c := contributionOf(key, r)
		contributions[key] = c
		for ap, route := range c.routes.tcp {
			overlapping = overlapping || made.tcp[ap] != nil
			made.tcp[ap] = route
		}
		for ap, route := range c.routes.udp {
			overlapping = overlapping || made.udp[ap] != nil
			made.udp[ap] = route
		}
		for _, ap := range c.routes.listen {
			made.targets[sklookup.Target{Protocol: c.protocol, Addr: ap}] = c.action
		}
	}
	return made, contributions, overlapping
}

// patchSteering is rebuildSteering for the touched relays alone: it takes
// their last contributions out of copies of the routes (publishing them)
// and puts their new ones in, and returns the targets to set and to delete.
// ok is false when it cannot (all, no contributions yet, or an address and
// port two relays want), and then it changed nothing.
func (m *Mode) patchSteering(touched []balancer.Key, all bool) (set map[sklookup.Target]sklookup.Action, del []sklookup.Target, ok bool) {
	st := m.steering
	if all || st.contributions == nil || st.overlapping {
		return nil, nil, false
	}
	type change struct {
		key     balancer.Key
		old     steeredContribution
		had     bool
		new     steeredContribution
		steered bool
	}
	var changes []change
	for _, key := range touched {
		old, had := st.contributions[key]
		r, steered := m.relays[key]
		steered = steered && r.steered
		var c steeredContribution
		if steered {
			c = contributionOf(key, r)
		}
		if had == steered && (!had || c.same(old)) {
			continue
		}
		changes = append(changes, change{key: key, old: old, had: had, new: c, steered: steered})
	}
	if len(changes) == 0 {
		return nil, nil, true
	}
	tcpRoutes, udpRoutes := maps.Clone(*st.tcpRoutes.Load()), maps.Clone(*st.udpRoutes.Load())
	set = map[sklookup.Target]sklookup.Action{}
	removed := map[sklookup.Target]bool{}
	for _, ch := range changes {
		if !ch.had {
			continue
		}
		for ap := range ch.old.routes.tcp {
			delete(tcpRoutes, ap)
		}
		for ap := range ch.old.routes.udp {
			delete(udpRoutes, ap)
		}
		for _, ap := range ch.old.routes.listen {
			removed[sklookup.Target{Protocol: ch.old.protocol, Addr: ap}] = true
		}
	}
	for _, ch := range changes {
		if !ch.steered {
			continue
		}
		for ap, route := range ch.new.routes.tcp {
			if tcpRoutes[ap] != nil {
				return nil, nil, false
			}
			tcpRoutes[ap] = route
		}
		for ap, route := range ch.new.routes.udp {
			if udpRoutes[ap] != nil {
				return nil, nil, false
			}
			udpRoutes[ap] = route
		}
		for _, ap := range ch.new.routes.listen {
			t := sklookup.Target{Protocol: ch.new.protocol, Addr: ap}
			set[t] = ch.new.action
			delete(removed, t)
		}
	}
	for _, ch := range changes {
		if ch.steered {
			st.contributions[ch.key] = ch.new
		} else {
			delete(st.contributions, ch.key)
		}
	}
	// Relay routes first: a connection steered before its route is in
	// would be refused.
	st.tcpRoutes.Store(&tcpRoutes)
	st.udpRoutes.Store(&udpRoutes)
	return set, slices.Collect(maps.Keys(removed)), true
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
	// The relay's metrics count into its service port's counters too: with
	// them the shared relays count each service port apart.
	var tcpMetrics *lbmetrics.Protocol
	if spec.protocol == v1.ProtocolTCP {
		tcpMetrics = r.metrics.For(lbmetrics.ProtocolTCP)
	}
	for _, ap := range spec.listen {
		// The admission reads the relay's spec of the moment: source
		// ranges change without a new route.
		admit := func(client netip.Addr) bool { return r.spec.Load().admits(ap, client) }
		switch spec.protocol {
		case v1.ProtocolTCP:
			if rt.tcp == nil {
				rt.tcp = make(map[netip.AddrPort]*tcprelay.Route, len(spec.listen))
			}
			rt.tcp[ap] = &tcprelay.Route{Name: name, Picker: r.picker, Admit: admit, Port: r.limit, Metrics: tcpMetrics}
		case v1.ProtocolUDP:
			if rt.udp == nil {
				rt.udp = make(map[netip.AddrPort]*udprelay.Route, len(spec.listen))
			}
			rt.udp[ap] = &udprelay.Route{Name: name, Picker: r.picker, Admit: admit, Metrics: r.metrics}
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
	for _, u := range st.udp[r.key.Family] {
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
	for _, relays := range st.udp {
		for _, u := range relays {
			errs = append(errs, u.Close())
		}
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
		if m.kinds[fam] == contract.PortalsSKLookup {
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
