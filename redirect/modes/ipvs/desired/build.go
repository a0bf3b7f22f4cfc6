package desired

import (
	"net/netip"
	"slices"
	"time"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/servicemap"
)

// Build computes the desired state of cfg's family for every port of snap.
func Build(cfg Config, snap *servicemap.Snapshot) (*State, error) {
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	b := newBuilder(cfg)
	for _, sp := range snap.All() {
		b.addPort(sp)
	}
	return b.finish(), nil
}

// builder accumulates one family's state port by port.
type builder struct {
	cfg   Config
	v6    bool
	local map[netip.Addr]bool
	// nodePortIPs are the addresses NodePorts are served on.
	nodePortIPs []netip.Addr

	services  map[Key]*Service
	members   map[string][]Entry // by set Base
	bind      map[netip.Addr]bool
	conflicts []Conflict
	// noNodeAccess are load-balancer IP:ports whose source ranges leave the
	// node out: the node itself must not reach them (KUBE-IPVS-OUT-FILTER).
	noNodeAccess []Entry
}

func newBuilder(cfg Config) *builder {
	b := &builder{
		cfg:      cfg,
		v6:       cfg.Family == ipfamily.IPv6,
		local:    make(map[netip.Addr]bool, len(cfg.LocalAddrs)),
		services: make(map[Key]*Service),
		members:  make(map[string][]Entry),
		bind:     make(map[netip.Addr]bool),
	}
	for _, a := range cfg.LocalAddrs {
		if a = a.Unmap(); nodeAddress(a) {
			b.local[a] = true
		}
	}
	b.nodePortIPs = nodePortIPs(cfg)
	return b
}

// nodeAddress says whether a local address counts as one of the node's, as
// kube-proxy's IPVS mode counts them: not loopback (IPVS does not send a
// loopback source off the node, so a NodePort there could never answer)
// and not IPv6 link-local.
func nodeAddress(a netip.Addr) bool {
	return !a.IsLoopback() && !(a.Is6() && a.IsLinkLocalUnicast())
}

// nodePortIPs follows kube-proxy: every node address (see nodeAddress) when
// --nodeport-addresses is empty (or holds a /0), else the non-loopback local
// addresses inside its prefixes.
func nodePortIPs(cfg Config) []netip.Addr {
	ips := nodeaddr.Select(cfg.NodePortAddresses, cfg.LocalAddrs, cfg.Family)
	if nodeaddr.MatchAll(cfg.NodePortAddresses) {
		return slices.DeleteFunc(ips, func(a netip.Addr) bool { return !nodeAddress(a) })
	}
	return slices.DeleteFunc(ips, netip.Addr.IsLoopback)
}

func (b *builder) ofFamily(as []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		if ipfamily.Of(a) == b.cfg.Family {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func (b *builder) member(set string, e Entry) { b.members[set] = append(b.members[set], e) }

// addPort adds one service port's virtual servers and set members. A port
// without a cluster IP of this family belongs to the other family's state.
func (b *builder) addPort(sp *servicemap.ServicePort) {
	clusterIPs := b.ofFamily(sp.ClusterIPs)
	if len(clusterIPs) == 0 {
		return
	}
	proto := sp.Name.Protocol
	internal := b.realServers(sp, sp.InternalPolicyLocal)
	external := b.realServers(sp, sp.ExternalPolicyLocal)

	// Hairpin: a local endpoint reaching itself through the service must
	// be masqueraded, or it would answer itself directly.
	for _, ep := range sp.Endpoints {
		if ep.IsLocal && servicemap.IsIPv6(ep.Addr) == b.v6 {
			a := ep.Addr.Unmap()
			b.member(SetLoopBack, Entry{IP: a, Protocol: proto, Port: ep.Port, IP2: a})
		}
	}

	for _, ip := range clusterIPs {
		b.member(SetClusterIP, Entry{IP: ip, Protocol: proto, Port: sp.Port})
		b.addService(sp, ip, sp.Port, true, internal)
	}
	for _, ip := range b.ofFamily(sp.ExternalIPs) {
		set := SetExternalIP
		if sp.ExternalPolicyLocal {
			set = SetExternalIPLocal
		}
		b.member(set, Entry{IP: ip, Protocol: proto, Port: sp.Port})
		b.addService(sp, ip, sp.Port, !b.local[ip], external)
	}
	ranges := b.sourceRanges(sp)
	for _, ip := range b.ofFamily(sp.LoadBalancerIPs) {
		e := Entry{IP: ip, Protocol: proto, Port: sp.Port}
		b.member(SetLoadBalancer, e)
		if sp.ExternalPolicyLocal {
			b.member(SetLoadBalancerLocal, e)
		}
		if len(ranges) > 0 {
			b.addSourceRanges(e, ranges)
		}
		b.addService(sp, ip, sp.Port, !b.local[ip], external)
	}
	if sp.NodePort != 0 && len(b.nodePortIPs) > 0 {
		b.addNodePort(sp, external)
	}
	if sp.HealthCheckNodePort != 0 {
		b.member(SetHealthCheckNP, Entry{Port: sp.HealthCheckNodePort})
	}
}

// sourceRanges lists the service's load-balancer source ranges of this
// family. A hash:ip,port,net set cannot hold a zero-length network (the
// kernel stores 0.0.0.0/0 as 0.0.0.0/32), so "everything" becomes its two
// halves.
func (b *builder) sourceRanges(sp *servicemap.ServicePort) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range sp.LoadBalancerSourceRanges {
		if servicemap.IsIPv6(p.Addr()) != b.v6 {
			continue
		}
		p = p.Masked()
		if p.Bits() == 0 {
			low := netip.PrefixFrom(p.Addr(), 1)
			high := make([]byte, p.Addr().BitLen()/8)
			high[0] = 0x80
			highAddr, _ := netip.AddrFromSlice(high)
			out = append(out, low, netip.PrefixFrom(highAddr, 1))
			continue
		}
		out = append(out, p)
	}
	return out
}

// addSourceRanges admits each range to the load-balancer IP:port; when one
// holds a node IP, the VIP itself is admitted as a source too (a node's
// traffic to its own VIP leaves with the VIP as source), else the node is
// kept out explicitly.
func (b *builder) addSourceRanges(lb Entry, ranges []netip.Prefix) {
	b.member(SetLoadBalancerFW, lb)
	allowNode := false
	for _, r := range ranges {
		b.member(SetLBSourceCIDR, Entry{IP: lb.IP, Protocol: lb.Protocol, Port: lb.Port, Net: r})
		if slices.ContainsFunc(b.cfg.NodeIPs, r.Contains) {
			allowNode = true
		}
	}
	if allowNode {
		b.member(SetLBSourceIP, Entry{IP: lb.IP, Protocol: lb.Protocol, Port: lb.Port, IP2: lb.IP})
	} else {
		b.noNodeAccess = append(b.noNodeAccess, lb)
	}
}

func (b *builder) addNodePort(sp *servicemap.ServicePort, rs []RealServer) {
	proto := sp.Name.Protocol
	var set, localSet string
	var entries []Entry
	switch proto {
	case v1.ProtocolTCP, v1.ProtocolUDP:
		set, localSet = SetNodePortTCP, SetNodePortLocalTCP
		if proto == v1.ProtocolUDP {
			set, localSet = SetNodePortUDP, SetNodePortLocalUDP
		}
		entries = []Entry{{Port: sp.NodePort}}
	case v1.ProtocolSCTP:
		// bitmap:port has no protocol, so SCTP needs ip,port entries.
		set, localSet = SetNodePortSCTP, SetNodePortLocalSCTP
		for _, ip := range b.nodePortIPs {
			entries = append(entries, Entry{IP: ip, Protocol: proto, Port: sp.NodePort})
		}
	default:
		return
	}
	for _, e := range entries {
		b.member(set, e)
		if sp.ExternalPolicyLocal {
			b.member(localSet, e)
		}
	}
	for _, ip := range b.nodePortIPs {
		b.addService(sp, ip, sp.NodePort, false, rs)
	}
}

// realServers picks the endpoints exactly as the other modes do.
func (b *builder) realServers(sp *servicemap.ServicePort, local bool) []RealServer {
	eps := sp.EligibleEndpoints(b.v6, local, b.cfg.Topology)
	out := make([]RealServer, 0, len(eps))
	for _, ep := range eps {
		out = append(out, RealServer{Addr: ep.Addr.Unmap(), Port: ep.Port, Weight: 1})
	}
	slices.SortFunc(out, func(x, y RealServer) int { return x.AddrPort().Compare(y.AddrPort()) })
	return out
}

func (b *builder) addService(sp *servicemap.ServicePort, addr netip.Addr, port uint16, bind bool, rs []RealServer) {
	key := Key{Addr: addr, Protocol: sp.Name.Protocol, Port: port}
	if kept, ok := b.services[key]; ok {
		b.conflicts = append(b.conflicts, Conflict{Key: key, Kept: kept.Owner, Loser: sp.Name})
		return
	}
	vs := VirtualServer{Key: key, Scheduler: b.cfg.scheduler()}
	if sp.AffinityTimeout > 0 {
		vs.Flags |= FlagPersistent
		vs.Timeout = uint32(sp.AffinityTimeout / time.Second)
	}
	if vs.Scheduler == "mh" {
		vs.Flags |= FlagMHPort
	}
	b.services[key] = &Service{VirtualServer: vs, Owner: sp.Name, Bind: bind, RealServers: rs}
	if bind {
		b.bind[addr] = true
	}
}

func (b *builder) finish() *State {
	st := &State{Family: b.cfg.Family, Conflicts: b.conflicts}
	st.Services = make([]Service, 0, len(b.services))
	for _, s := range b.services {
		st.Services = append(st.Services, *s)
	}
	slices.SortFunc(st.Services, func(x, y Service) int { return x.Key.Compare(y.Key) })
	for a := range b.bind {
		st.Addresses = append(st.Addresses, a)
		b.member(SetIPVSAddrs, Entry{IP: a})
	}
	slices.SortFunc(st.Addresses, netip.Addr.Compare)
	for _, spec := range setSpecs(b.cfg.Family) {
		m := b.members[spec.Base]
		slices.SortFunc(m, Entry.Compare)
		st.Sets = append(st.Sets, Set{Spec: spec, Members: slices.CompactFunc(m, func(x, y Entry) bool { return x == y })})
	}
	slices.SortFunc(b.noNodeAccess, Entry.Compare)
	st.Tables = buildTables(b.cfg, st, slices.CompactFunc(b.noNodeAccess, func(x, y Entry) bool { return x == y }))
	st.Jumps = jumps()
	st.Sysctls = sysctls(b.cfg)
	return st
}

// sysctls are the settings the mode needs (kube-proxy sets them at start).
// Sysctls are the sysctls the IPVS mode needs whatever the services
// (--init-only writes them before any sync).
func Sysctls(cfg Config) []Sysctl { return sysctls(cfg) }

func sysctls(cfg Config) []Sysctl {
	out := []Sysctl{
		// IPVS connections must go through conntrack so masquerade works.
		{"net/ipv4/vs/conntrack", 1},
		// Drop connections to a deleted real server at once.
		{"net/ipv4/vs/expire_nodest_conn", 1},
		// Drop persistence templates of a weight-0 real server.
		{"net/ipv4/vs/expire_quiescent_template", 1},
		{"net/ipv4/ip_forward", 1},
	}
	if cfg.StrictARP {
		out = append(out, Sysctl{"net/ipv4/conf/all/arp_ignore", 1}, Sysctl{"net/ipv4/conf/all/arp_announce", 2})
	}
	return out
}
