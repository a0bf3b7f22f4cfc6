package userspace

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/lb/ports"
	"kproxy.dev/kproxy/lb/sctprelay"
	"kproxy.dev/kproxy/lb/tcprelay"
	"kproxy.dev/kproxy/lb/udprelay"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// relaySpec is what one relay serves: a service port's traffic of one class
// and family, arriving for the portal destinations listed.
type relaySpec struct {
	protocol v1.Protocol
	// destinations are the original destinations a portal may have
	// rewritten; a TCP connection whose original destination is not one of
	// them did not come through a portal and is refused.
	destinations destinations
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
// Protocols the kernel cannot serve (SCTP here) get none.
func (m *Mode) wantedRelays(snap *servicemap.Snapshot, node portal.Node) map[balancer.Key]relaySpec {
	want := map[balancer.Key]relaySpec{}
	for name, sp := range snap.All() {
		if name.Protocol == v1.ProtocolSCTP && !m.cfg.Features.SCTP.Present {
			continue
		}
		for _, fam := range m.families {
			if _, ok := hostIPOf(node.HostIPs, fam); !ok {
				continue
			}
			ofFamily := func(addrs []netip.Addr) []netip.AddrPort {
				var out []netip.AddrPort
				for _, a := range addrs {
					if ipfamily.Of(a) == fam {
						out = append(out, netip.AddrPortFrom(a, sp.Port))
					}
				}
				return out
			}
			if internal := ofFamily(sp.ClusterIPs); len(internal) > 0 {
				want[balancer.Key{Port: name, Class: balancer.Internal, Family: fam}] = relaySpec{
					protocol: name.Protocol, destinations: destinations{addrs: internal}}
			}
			external := append(ofFamily(sp.ExternalIPs), ofFamily(sp.LoadBalancerIPs)...)
			if len(external) > 0 || sp.NodePort != 0 {
				want[balancer.Key{Port: name, Class: balancer.External, Family: fam}] = relaySpec{
					protocol: name.Protocol, destinations: destinations{addrs: external, nodePort: sp.NodePort}}
			}
		}
	}
	return want
}

// relay is one running relay and the proxy port it listens on.
type relay struct {
	key  balancer.Key
	port uint16
	ipv6 bool
	spec atomic.Pointer[relaySpec]

	tcp  *tcprelay.Proxy
	udp  *udprelay.Relay
	sctp *sctprelay.Relay

	// picker is the relay's current picker. usableFor and usable cache
	// whether it had an endpoint when last asked, for that *ServicePort:
	// whether a class is empty depends on the port alone (topology hints
	// only ever narrow a non-empty set), snapshots share unchanged ports,
	// and asking is a Pick, which moves the round-robin cursor, so a sync
	// only asks about ports that changed. Only Sync touches these fields.
	picker    lb.Picker
	usableFor *servicemap.ServicePort
	usable    bool
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

// startRelay opens the proxy socket on the wildcard address of the key's
// family (portals REDIRECT to the receiving interface's address, or DNAT to
// the host IP) and starts serving it.
func (m *Mode) startRelay(key balancer.Key, spec relaySpec) (*relay, error) {
	r := &relay{key: key, ipv6: key.Family == ipfamily.IPv6}
	r.spec.Store(&spec)
	any := netip.IPv4Unspecified()
	if r.ipv6 {
		any = netip.IPv6Unspecified()
	}
	picker := m.balancer.Picker(key)
	r.picker = picker
	name := key.String()
	switch spec.protocol {
	case v1.ProtocolTCP:
		ln, err := m.alloc.ListenTCP(any)
		if err != nil {
			return nil, fmt.Errorf("%s: opening a proxy port: %w", name, err)
		}
		r.port = addrPort(ln.Addr())
		p, err := tcprelay.New(tcprelay.Config{Listener: ln, Picker: picker, Metrics: m.metrics, Name: name, Logger: m.logger,
			IsPortalDestination: func(dst netip.AddrPort) bool { return r.spec.Load().destinations.has(dst) }})
		if err != nil {
			ln.Close()
			m.alloc.ReleaseAddr(ln.Addr())
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.tcp = p
		m.serve(func() { _ = p.Serve(m.ctx) })
	case v1.ProtocolUDP:
		conn, err := m.alloc.ListenUDP(any)
		if err != nil {
			return nil, fmt.Errorf("%s: opening a proxy port: %w", name, err)
		}
		r.port = addrPort(conn.LocalAddr())
		u, err := udprelay.New(udprelay.Config{Conn: conn, Picker: picker, IdleTimeout: m.cfg.UDPIdleTimeout, Logger: m.logger,
			Metrics: m.metrics, Name: name})
		if err != nil {
			conn.Close()
			m.alloc.ReleaseAddr(conn.LocalAddr())
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.udp = u
		m.serve(func() { _ = u.Serve(m.ctx) })
	case v1.ProtocolSCTP:
		var ln *sctprelay.Listener
		port, err := m.alloc.Claim(ports.SCTP, r.ipv6, func(port uint16) error {
			var err error
			ln, err = sctprelay.Listen(netip.AddrPortFrom(any, port))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: opening a proxy port: %w", name, err)
		}
		r.port = port
		if port == 0 {
			r.port = ln.Addr().Port()
		}
		s, err := sctprelay.New(sctprelay.Config{Listener: ln, Picker: picker, Metrics: m.metrics, Name: name, Logger: m.logger})
		if err != nil {
			ln.Close()
			m.alloc.Release(ports.SCTP, r.ipv6, port)
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.sctp = s
		m.serve(func() { _ = s.Serve(m.ctx) })
	default:
		return nil, fmt.Errorf("%s: protocol %q is not supported", name, spec.protocol)
	}
	return r, nil
}

func (m *Mode) serve(fn func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
}

// update hands a running relay its current portal destinations and picker.
// The balancer keeps one picker per key, but a key that disappeared and came
// back gets a new one.
func (r *relay) update(spec relaySpec, picker lb.Picker) {
	r.spec.Store(&spec)
	if picker != r.picker {
		r.picker, r.usableFor = picker, nil
	}
	switch {
	case r.tcp != nil:
		r.tcp.SetPicker(picker)
	case r.udp != nil:
		r.udp.SetPicker(picker)
	case r.sctp != nil:
		r.sctp.SetPicker(picker)
	}
}

// closeFlowsTo makes UDP flows to a departed endpoint pick again.
func (r *relay) closeFlowsTo(ep netip.AddrPort) {
	if r.udp != nil {
		r.udp.CloseFlowsTo(ep)
	}
}

// close stops accepting and returns the proxy port. Established TCP
// connections of a removed service are reset, as its endpoints are gone.
func (r *relay) close(alloc *ports.Allocator) {
	switch {
	case r.tcp != nil:
		_ = r.tcp.CloseAll()
		alloc.Release(ports.TCP, r.ipv6, r.port)
	case r.udp != nil:
		_ = r.udp.Close()
		alloc.Release(ports.UDP, r.ipv6, r.port)
	case r.sctp != nil:
		_ = r.sctp.Close()
		alloc.Release(ports.SCTP, r.ipv6, r.port)
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
