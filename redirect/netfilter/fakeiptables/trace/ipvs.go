package trace

import (
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/internal/rulespec"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// VirtualServer is one IPVS virtual service of Node.VirtualServers,
// forwarding by NAT (masquerading), as kube-proxy's IPVS mode sets it up.
type VirtualServer struct {
	// Protocol is "tcp", "udp" or "sctp".
	Protocol string
	Address  netip.AddrPort
	// Scheduler names the scheduling algorithm; it is only shown in
	// Path.Rules (shares follow the weights, see RealServer).
	Scheduler   string
	RealServers []RealServer
}

// RealServer is one destination of a virtual server. A new connection goes
// to a real server with a positive weight, each taking weight/total of the
// paths' probability: what round robin gives over many connections when
// the weights are equal (kube-proxy's are all 1), and weighted round robin
// in general. Other schedulers pick by load or by hash, so a single client
// may see other shares, but never a real server of weight 0.
type RealServer struct {
	Address netip.AddrPort
	Weight  int
}

func (vs VirtualServer) String() string {
	s := fmt.Sprintf("%s %s", vs.Protocol, vs.Address)
	if vs.Scheduler != "" {
		s += " " + vs.Scheduler
	}
	return s
}

// lookupVirtualServer finds the virtual server a packet to dst:dport hits.
func (n Node) lookupVirtualServer(proto string, dst netip.AddrPort) (VirtualServer, bool) {
	for _, vs := range n.VirtualServers {
		if vs.Protocol == proto && vs.Address == dst {
			return vs, true
		}
	}
	return VirtualServer{}, false
}

// ipvs is IPVS's scheduling hook, where the kernel registers it: at
// LOCAL_IN after filter INPUT for a packet from elsewhere, at LOCAL_OUT
// after nat OUTPUT for one the node sends. A packet that is no virtual
// server's comes back untouched. One that is, is rewritten to each real
// server it may go to (its probability split by weight), or refused with
// ICMP port unreachable when there is none, or dropped when its loopback
// source would have to leave the node (the kernel will not route that).
// The refusals are recorded as paths.
func (t *tracer) ipvs(f flow) []flow {
	vs, ok := t.node.lookupVirtualServer(f.pkt.Protocol, netip.AddrPortFrom(f.dst, f.dport))
	if !ok {
		return []flow{f}
	}
	total := 0
	for _, rs := range vs.RealServers {
		total += max(rs.Weight, 0)
	}
	if total == 0 {
		refused := f.matched(fmt.Sprintf("ipvs: %s has no real server with a positive weight: ICMP port unreachable", vs))
		refused.vs = vs.Address
		t.paths = append(t.paths, refused.path(Rejected, false))
		return nil
	}
	var out []flow
	for _, rs := range vs.RealServers {
		if rs.Weight <= 0 {
			continue
		}
		g := f.matched(fmt.Sprintf("ipvs: %s -> %s weight %d", vs, rs.Address, rs.Weight))
		g.prob *= float64(rs.Weight) / float64(total)
		g.dst, g.dport, g.vs = rs.Address.Addr(), rs.Address.Port(), vs.Address
		if f.pkt.Source.IsLoopback() && !t.node.isLocal(g.dst) {
			g = g.matched("ipvs: a loopback source cannot be routed off the node: dropped")
			t.paths = append(t.paths, g.path(Dropped, false))
			continue
		}
		out = append(out, g)
	}
	return out
}

// matchIPVS evaluates "-m ipvs" the way xt_ipvs does: --ipvs alone tests
// whether IPVS handled the packet; with --vproto, --vaddr or --vport, a
// packet IPVS has not handled never matches, whatever their negation, and
// a "! --ipvs" beside them is not looked at.
func matchIPVS(m rulespec.Match, f flow) (bool, error) {
	handled := f.vs.IsValid()
	if len(m.Options) == 1 && m.Options[0].Name == "--ipvs" {
		return handled != m.Options[0].Negated, nil
	}
	if !handled {
		return false, nil
	}
	for _, o := range m.Options {
		var ok bool
		var err error
		switch o.Name {
		case "--ipvs":
			continue
		case "--vproto":
			ok = o.Arg == protocolNumber(f.pkt.Protocol)
		case "--vaddr":
			var prefix netip.Prefix
			prefix, err = rulespec.ParsePrefix(o.Arg, ipfamily.Of(f.vs.Addr()))
			ok = prefix.Contains(f.vs.Addr())
		case "--vport":
			var port uint16
			port, err = rulespec.ParseToPort(o.Arg)
			ok = port == f.vs.Port()
		default:
			err = fmt.Errorf("not modelled")
		}
		if err != nil {
			return false, fmt.Errorf("%s %s: %w", o.Name, o.Arg, err)
		}
		if ok == o.Negated {
			return false, nil
		}
	}
	return true, nil
}

// protocolNumber is a protocol's number as iptables-save prints --vproto.
func protocolNumber(proto string) string {
	switch proto {
	case "tcp":
		return "6"
	case "udp":
		return "17"
	case "sctp":
		return "132"
	}
	return proto
}

// check refuses a table IPVS would not hold: a protocol other than tcp,
// udp or sctp, addresses of another family than the dump's (IPVS's NAT
// forwarding does not cross families), a negative weight, a virtual
// server listed twice.
func (vs VirtualServer) check(fam ipfamily.Family) error {
	switch {
	case vs.Protocol != "tcp" && vs.Protocol != "udp" && vs.Protocol != "sctp":
		return fmt.Errorf("protocol %q: want tcp, udp or sctp", vs.Protocol)
	case !vs.Address.IsValid() || ipfamily.Of(vs.Address.Addr()) != fam:
		return fmt.Errorf("address %s is not an %s address and port", vs.Address, fam)
	}
	for _, rs := range vs.RealServers {
		switch {
		case !rs.Address.IsValid() || ipfamily.Of(rs.Address.Addr()) != fam:
			return fmt.Errorf("real server %s is not an %s address and port", rs.Address, fam)
		case rs.Weight < 0:
			return fmt.Errorf("real server %s has a negative weight %d", rs.Address, rs.Weight)
		}
	}
	return nil
}
