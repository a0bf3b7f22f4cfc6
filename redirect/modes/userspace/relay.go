package userspace

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"syscall"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/ports"
	"kproxy.dev/kproxy/lb/sctprelay"
	"kproxy.dev/kproxy/lb/tcprelay"
	"kproxy.dev/kproxy/lb/udprelay"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// relaySpec is what one relay serves: a service port's traffic of one class
// and family.
type relaySpec struct {
	protocol v1.Protocol
	// port is the service port in the snapshot the spec was made from.
	port *servicemap.ServicePort
	// destinations (REDIRECT portals) are the original destinations a
	// portal may have rewritten; a TCP connection whose original
	// destination is not one of them did not come through a portal and is
	// refused.
	destinations destinations
	// listen (local and socket-lookup portals) are the addresses the
	// relay serves: the service's own addresses, and NodePorts on node
	// addresses. Local portals bind a socket to each; socket-lookup portals
	// steer each to the shared sockets.
	listen []netip.AddrPort
	// ranged are the LoadBalancer IPs whose clients must come from
	// sourceRanges (local portals; the REDIRECT portals' firewall chain does
	// this for them).
	ranged       []netip.Addr
	sourceRanges []netip.Prefix
}

// admits says whether client may use the relay's socket bound to local.
func (s *relaySpec) admits(local netip.AddrPort, client netip.Addr) bool {
	if len(s.sourceRanges) == 0 || !slices.Contains(s.ranged, local.Addr()) {
		return true
	}
	return slices.ContainsFunc(s.sourceRanges, func(p netip.Prefix) bool { return p.Contains(client) })
}

// destinations matches original destinations: exact address:port pairs, and
// for NodePorts any local address with the node port.
type destinations struct {
	addrs    []netip.AddrPort
	nodePort uint16
}

func (d destinations) has(dst netip.AddrPort) bool {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	return slices.Contains(d.addrs, dst) || (d.nodePort != 0 && dst.Port() == d.nodePort)
}

// wantedRelays lists the relays snap needs: per family, one for internal
// traffic when the port has a cluster IP of that family, and one for external
// traffic when it has a NodePort or external/LB IPs of that family.
// Protocols the kernel cannot serve (SCTP here) get none. nodePortAddrs
// are, per family, the addresses local portals open NodePorts on.
func (m *Mode) wantedRelays(snap *servicemap.Snapshot, node portal.Node, nodePortAddrs map[ipfamily.Family][]netip.Addr) map[balancer.Key]relaySpec {
	want := map[balancer.Key]relaySpec{}
	for name, sp := range snap.All() {
		m.addWantedRelays(want, name, sp, node, nodePortAddrs)
	}
	return want
}

// addWantedRelays adds to want the relays of one service port (see
// wantedRelays).
func (m *Mode) addWantedRelays(want map[balancer.Key]relaySpec, name servicemap.ServicePortName, sp *servicemap.ServicePort,
	node portal.Node, nodePortAddrs map[ipfamily.Family][]netip.Addr) {
	if name.Protocol == v1.ProtocolSCTP && !m.cfg.Features.SCTP.Present {
		return
	}
	for _, fam := range m.families {
		if _, ok := hostIPOf(node.HostIPs, fam); !ok {
			continue
		}
		withPort := func(addrs []netip.Addr, port uint16) []netip.AddrPort {
			var out []netip.AddrPort
			for _, a := range ipfamily.Addrs(addrs, fam) {
				out = append(out, netip.AddrPortFrom(a, port))
			}
			return out
		}
		local := routesServiceAddresses(m.kinds[fam])
		if internal := withPort(sp.ClusterIPs, sp.Port); len(internal) > 0 {
			spec := relaySpec{protocol: name.Protocol, port: sp}
			if local {
				spec.listen = internal
			} else {
				spec.destinations = destinations{addrs: internal}
			}
			want[balancer.Key{Port: name, Class: balancer.Internal, Family: fam}] = spec
		}
		lbIPs := ipfamily.Addrs(sp.LoadBalancerIPs, fam)
		external := withPort(append(ipfamily.Addrs(sp.ExternalIPs, fam), lbIPs...), sp.Port)
		if len(external) == 0 && sp.NodePort == 0 {
			continue
		}
		spec := relaySpec{protocol: name.Protocol, port: sp}
		if local {
			listen := external
			if sp.NodePort != 0 {
				listen = append(listen, withPort(nodePortAddrs[fam], sp.NodePort)...)
			}
			slices.SortFunc(listen, netip.AddrPort.Compare)
			spec.listen = slices.Compact(listen)
			spec.ranged = lbIPs
			spec.sourceRanges = ipfamily.Prefixes(sp.LoadBalancerSourceRanges, fam)
		} else {
			spec.destinations = destinations{addrs: external, nodePort: sp.NodePort}
		}
		want[balancer.Key{Port: name, Class: balancer.External, Family: fam}] = spec
	}
}

// relay is one running relay: the sockets serving one balancer key.
type relay struct {
	key  balancer.Key
	ipv6 bool
	// local: the relay binds a socket to each listen address (local
	// portals, and SCTP under socket-lookup portals, which the program
	// cannot steer).
	local bool
	// steered: the relay has no socket of its own; the socket-lookup
	// program steers its listen addresses to the shared sockets, whose
	// routes name it (steer.go).
	steered bool
	spec    atomic.Pointer[relaySpec]
	// port is a REDIRECT portal's proxy port, on the wildcard address.
	port uint16
	// servers are the listening sockets and what serves each: one on the
	// proxy port for REDIRECT portals; for local portals one per listen
	// address, none while the service port has no endpoints.
	servers map[netip.AddrPort]*server
	// limit bounds the service port's TCP connections or SCTP
	// associations, over all its servers.
	limit *fdbudget.Port
	// dropping: the servers drop new clients silently (a Local traffic
	// policy without local endpoints).
	dropping bool

	// picker is the relay's current picker. usableFor and usable cache
	// whether it had an endpoint when last asked, for that *ServicePort:
	// whether a class is empty depends on the port alone (topology hints
	// only ever narrow a non-empty set), snapshots share unchanged ports,
	// and asking is a Pick, which moves the round-robin cursor, so a sync
	// only asks about ports that changed. Only Sync touches these fields.
	picker    lb.Picker
	usableFor *servicemap.ServicePort
	usable    bool

	// routes are a steered relay's routes in the shared relays
	// (steer.go); only Sync touches them.
	routes steeredRoutes
	// metrics count into the data plane's series and into the service
	// port's counters (servedPorts).
	metrics *lbmetrics.Metrics
}

// server is one listening socket and the protocol relay serving it.
type server struct {
	raw      syscall.RawConn
	tcp      *tcprelay.Proxy
	udp      *udprelay.Relay
	sctp     *sctprelay.Relay
	dropping bool
	// letThrough are the sources a dropping socket still serves.
	letThrough []netip.Prefix
	// awaitingGuard: a REDIRECT portal's UDP socket drops every datagram
	// until the portal rules, with the guard refusing datagrams that were
	// not DNATed to it, are in the kernel. (UDP cannot tell a redirected
	// datagram from a direct one; TCP checks the original destination.)
	awaitingGuard bool
}

// hasEndpoints says whether the relay's picker has an endpoint for a new
// client of sp. Pick with the zero client reads no affinity pin (no client
// has the zero address) and pins nothing.
func (r *relay) hasEndpoints(sp *servicemap.ServicePort) bool {
	if r.usableFor != sp || sp == nil {
		r.usableFor = sp
		r.usable = len(r.picker.Pick(netip.Addr{})) > 0
	}
	return r.usable
}

// startRelay starts a relay for key. A REDIRECT portal's relay opens its
// proxy socket on the wildcard address of the key's family (portals
// REDIRECT to the receiving interface's address, or DNAT to the host IP);
// a local portal's opens its sockets in syncListeners.
func (m *Mode) startRelay(key balancer.Key, spec relaySpec) (*relay, error) {
	kind := m.kinds[key.Family]
	r := &relay{key: key, ipv6: key.Family == ipfamily.IPv6, servers: map[netip.AddrPort]*server{}}
	r.steered = kind == contract.PortalsSKLookup && spec.protocol != v1.ProtocolSCTP
	r.local = kind == contract.PortalsLocal || (kind == contract.PortalsSKLookup && !r.steered)
	r.spec.Store(&spec)
	r.picker = m.balancer.Picker(key)
	r.metrics = m.metrics.WithPort(metricsProtocol(key.Port.Protocol), m.served.counters(key.Port))
	if spec.protocol == v1.ProtocolTCP || spec.protocol == v1.ProtocolSCTP {
		var err error
		if r.limit, err = fdbudget.NewPort(m.portLimits); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	if r.local || r.steered {
		return r, nil
	}
	any := netip.IPv4Unspecified()
	if r.ipv6 {
		any = netip.IPv6Unspecified()
	}
	s, port, err := m.openServer(r, netip.AddrPortFrom(any, 0))
	if err != nil {
		return nil, err
	}
	r.port = port
	r.servers[netip.AddrPortFrom(any, port)] = s
	return r, nil
}

// syncListeners brings a local portal relay's sockets in line with its spec
// and endpoint state: no sockets without endpoints (the kernel then refuses
// at once: a reset, an ICMP port unreachable), sockets that drop new clients
// for a Local policy without local endpoints, serving sockets otherwise.
func (m *Mode) syncListeners(r *relay, state portal.EndpointState) []error {
	var want []netip.AddrPort
	if state != portal.NoEndpoints {
		want = r.spec.Load().listen
	}
	for ap, s := range r.servers {
		if !slices.Contains(want, ap) {
			s.close()
			delete(r.servers, ap)
		}
	}
	var errs []error
	drop := state == portal.NoLocalEndpoints
	var letThrough []netip.Prefix
	if drop && r.key.Class == balancer.External {
		// The node's own and its pods' clients are short-circuited.
		letThrough = m.fromNode
	}
	for _, ap := range want {
		s, ok := r.servers[ap]
		if !ok {
			var err error
			if s, _, err = m.openServer(r, ap); err != nil {
				// Another socket holding ap is reported by conflicts.
				if err = m.conflicts.note(r, ap, err); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			r.servers[ap] = s
		}
		if s.dropping != drop || !slices.Equal(s.letThrough, letThrough) {
			if err := setDropUnless(s.raw, drop, r.key.Family, letThrough, r.key.Class == balancer.External); err != nil {
				errs = append(errs, fmt.Errorf("%s on %s: %w", r.key, ap, err))
				continue
			}
			s.dropping, s.letThrough = drop, letThrough
		}
	}
	return errs
}

// openServer opens a socket on ap for r and starts serving it. Port 0
// (REDIRECT portals) allocates a proxy port from the range; any other port
// is a local portal's, bound as is. It returns the port bound.
func (m *Mode) openServer(r *relay, ap netip.AddrPort) (*server, uint16, error) {
	name := r.key.String()
	where := "opening a proxy port"
	if ap.Port() != 0 {
		where = "listening on " + ap.String()
	}
	spec := r.spec.Load()
	s := &server{}
	var port uint16
	switch spec.protocol {
	case v1.ProtocolTCP:
		ln, err := m.listenTCP(ap)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %s: %w", name, where, explainInUse(err, ap))
		}
		port = addrPort(ln.Addr())
		cfg := tcprelay.Config{Listener: ln, Picker: r.picker, Metrics: r.metrics, Name: name, Logger: m.logger,
			Dials: m.dials, Port: r.limit, KeepSource: m.kept.keeper}
		if r.local {
			cfg.Direct = true
			cfg.Admit = func(client netip.Addr) bool { return r.spec.Load().admits(ap, client) }
		} else {
			cfg.IsPortalDestination = func(dst netip.AddrPort) bool { return r.spec.Load().destinations.has(dst) }
		}
		if s.raw, err = ln.SyscallConn(); err == nil {
			err = m.markRelaySocket(r, s.raw)
		}
		if err == nil {
			s.tcp, err = tcprelay.New(cfg)
		}
		if err != nil {
			ln.Close()
			m.release(ports.TCP, r, ap, port)
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		m.serve(func() { _ = s.tcp.Serve(m.ctx) })
	case v1.ProtocolUDP:
		conn, err := m.listenUDP(ap)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %s: %w", name, where, explainInUse(err, ap))
		}
		port = addrPort(conn.LocalAddr())
		cfg := udprelay.Config{Conn: conn, Picker: r.picker, IdleTimeout: m.cfg.UDPIdleTimeout, Logger: m.logger,
			Metrics: r.metrics, Name: name, Descriptors: m.descriptors, Dials: m.dials, KeepSource: m.kept.keeper}
		if r.local {
			cfg.Admit = func(client netip.Addr) bool { return r.spec.Load().admits(ap, client) }
		}
		if s.raw, err = conn.SyscallConn(); err == nil {
			err = m.markRelaySocket(r, s.raw)
		}
		if err == nil && !r.local {
			// No datagram may be relayed before the rule refusing direct
			// ones is in the kernel (armGuardedRelays lifts this).
			err = awaitGuard(s.raw)
			s.awaitingGuard = err == nil
		}
		if err == nil {
			s.udp, err = udprelay.New(cfg)
		}
		if err != nil {
			conn.Close()
			m.release(ports.UDP, r, ap, port)
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		m.serve(func() { _ = s.udp.Serve(m.ctx) })
	case v1.ProtocolSCTP:
		ln, err := m.listenSCTP(r, ap)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %s: %w", name, where, explainInUse(err, ap))
		}
		port = ln.Addr().Port()
		// No markRelaySocket: the socket match cannot look SCTP sockets
		// up, so the rules keep checking SCTP by conntrack alone.
		if s.raw, err = ln.SyscallConn(); err == nil {
			s.sctp, err = sctprelay.New(sctprelay.Config{Listener: ln, Picker: r.picker, Metrics: r.metrics, Name: name, Logger: m.logger,
				Dials: m.dials, Port: r.limit})
		}
		if err != nil {
			ln.Close()
			m.release(ports.SCTP, r, ap, port)
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		m.serve(func() { _ = s.sctp.Serve(m.ctx) })
	default:
		return nil, 0, fmt.Errorf("%s: protocol %q is not supported", name, spec.protocol)
	}
	return s, port, nil
}

func (m *Mode) listenTCP(ap netip.AddrPort) (*net.TCPListener, error) {
	if ap.Port() == 0 {
		return m.alloc.ListenTCP(ap.Addr())
	}
	ln, err := localPortalListenConfig().Listen(m.ctx, networkOf("tcp", ap), ap.String())
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

func (m *Mode) listenUDP(ap netip.AddrPort) (*net.UDPConn, error) {
	if ap.Port() == 0 {
		return m.alloc.ListenUDP(ap.Addr())
	}
	c, err := localPortalListenConfig().ListenPacket(m.ctx, networkOf("udp", ap), ap.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}

func (m *Mode) listenSCTP(r *relay, ap netip.AddrPort) (*sctprelay.Listener, error) {
	if ap.Port() != 0 {
		return sctprelay.Listen(ap)
	}
	var ln *sctprelay.Listener
	_, err := m.alloc.Claim(ports.SCTP, r.ipv6, func(port uint16) error {
		var err error
		ln, err = sctprelay.Listen(netip.AddrPortFrom(ap.Addr(), port))
		return err
	})
	return ln, err
}

// release returns an allocated proxy port; local portals' ports are the
// services' own and were never allocated.
func (m *Mode) release(proto ports.Protocol, r *relay, ap netip.AddrPort, port uint16) {
	if !r.local && ap.Port() == 0 && port != 0 {
		m.alloc.Release(proto, r.ipv6, port)
	}
}

// explainInUse says a local portal cannot bind because another socket
// holds its address; portalConflicts names which.
func explainInUse(err error, ap netip.AddrPort) error {
	if ap.Port() != 0 && errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w: another socket on the node holds %s", err, ap)
	}
	return err
}

func networkOf(base string, ap netip.AddrPort) string {
	if ap.Addr().Unmap().Is4() {
		return base + "4"
	}
	return base + "6"
}

func (m *Mode) serve(fn func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
}

// update hands a running relay its current spec and picker. The balancer
// keeps one picker per key, but a key that disappeared and came back gets a
// new one.
func (r *relay) update(spec relaySpec, picker lb.Picker) {
	r.spec.Store(&spec)
	if picker != r.picker {
		r.picker, r.usableFor = picker, nil
	}
	for _, s := range r.servers {
		s.setPicker(picker)
	}
}

func (s *server) setPicker(picker lb.Picker) {
	switch {
	case s.tcp != nil:
		s.tcp.SetPicker(picker)
	case s.udp != nil:
		s.udp.SetPicker(picker)
	case s.sctp != nil:
		s.sctp.SetPicker(picker)
	}
}

// closeFlowsTo makes UDP flows to a departed endpoint pick again.
func (r *relay) closeFlowsTo(ep netip.AddrPort, st *steering) {
	if r.steered {
		st.closeFlowsTo(r, ep)
		return
	}
	for _, s := range r.servers {
		if s.udp != nil {
			s.udp.CloseFlowsTo(ep)
		}
	}
}

// close stops accepting and returns the proxy port. Established TCP
// connections of a removed service are reset, as its endpoints are gone.
func (r *relay) close(alloc *ports.Allocator) {
	for ap, s := range r.servers {
		s.close()
		delete(r.servers, ap)
	}
	if r.local || r.steered || r.port == 0 {
		return
	}
	switch r.spec.Load().protocol {
	case v1.ProtocolTCP:
		alloc.Release(ports.TCP, r.ipv6, r.port)
	case v1.ProtocolUDP:
		alloc.Release(ports.UDP, r.ipv6, r.port)
	case v1.ProtocolSCTP:
		alloc.Release(ports.SCTP, r.ipv6, r.port)
	}
}

func (s *server) close() {
	switch {
	case s.tcp != nil:
		_ = s.tcp.CloseAll()
	case s.udp != nil:
		_ = s.udp.Close()
	case s.sctp != nil:
		_ = s.sctp.Close()
	}
}

func addrPort(a net.Addr) uint16 {
	switch a := a.(type) {
	case *net.TCPAddr:
		return uint16(a.Port)
	case *net.UDPAddr:
		return uint16(a.Port)
	}
	return 0
}
