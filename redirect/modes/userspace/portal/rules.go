package portal

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/servicemap"
)

// ProxyPorts are the ports the relays listen on for one service port: one per
// traffic class, because internal and external traffic policies may pick
// different endpoints. Both may be equal. A zero port means that class is not
// served (no listener), and its portals are left out.
type ProxyPorts struct {
	// Internal serves cluster IPs.
	Internal uint16
	// External serves NodePorts, externalIPs and LoadBalancer IPs.
	External uint16
}

// Portal is one service port, the proxy ports its traffic goes to, and
// whether each traffic class has endpoints to forward to.
type Portal struct {
	Port  *servicemap.ServicePort
	Proxy ProxyPorts
	// Endpoints is the zero value (both classes served) unless the caller
	// knows a class has no usable endpoint; see EndpointStateOf.
	Endpoints ClassEndpoints
}

// EndpointState says whether one traffic class of a service port has an
// endpoint its relay could forward to, and if not, how its clients are
// turned away. The values follow kube-proxy's iptables mode.
type EndpointState uint8

const (
	// HasEndpoints: the class is served; the zero value.
	HasEndpoints EndpointState = iota
	// NoLocalEndpoints: a Local traffic policy leaves the class without an
	// endpoint although other nodes have usable ones. New connections are
	// dropped silently (kube-proxy's "has no local endpoints" DROP), so a
	// client retries instead of concluding the service is down.
	NoLocalEndpoints
	// NoEndpoints: the service port has no usable endpoint anywhere. New
	// connections are refused at once: a TCP reset, an ICMP port
	// unreachable for UDP and SCTP (kube-proxy's "has no endpoints" REJECT).
	NoEndpoints
)

func (s EndpointState) String() string {
	switch s {
	case HasEndpoints:
		return "has endpoints"
	case NoLocalEndpoints:
		return "has no local endpoints"
	case NoEndpoints:
		return "has no endpoints"
	}
	return fmt.Sprintf("EndpointState(%d)", uint8(s))
}

// ClassEndpoints holds the EndpointState of each traffic class, like
// ProxyPorts holds their proxy ports.
type ClassEndpoints struct {
	// Internal is the state of cluster-IP traffic (internalTrafficPolicy).
	Internal EndpointState
	// External is the state of NodePort, externalIP and LoadBalancer IP
	// traffic (externalTrafficPolicy).
	External EndpointState
}

// EndpointStateOf classifies one traffic class of sp in family fam, given
// whether the balancer has an endpoint for it (usable). When it has none,
// the class is NoLocalEndpoints if some endpoint of the family would serve
// under a Cluster policy (ready, or serving and terminating), as only a
// Local policy can then have emptied the class; otherwise NoEndpoints.
func EndpointStateOf(sp *servicemap.ServicePort, fam ipfamily.Family, usable bool) EndpointState {
	if usable {
		return HasEndpoints
	}
	if sp != nil {
		for _, ep := range sp.Endpoints {
			if ipfamily.Of(ep.Addr) == fam && (ep.Ready || (ep.Serving && ep.Terminating)) {
				return NoLocalEndpoints
			}
		}
	}
	return NoEndpoints
}

// Node is what the rules need to know about this node.
type Node struct {
	// HostIPs holds, per family, the address locally generated service
	// traffic is DNATed to (the first one of each family is used); see
	// hostRule for why it is not REDIRECTed.
	HostIPs []netip.Addr
	// LocalAddresses are the node's own addresses. With NodePortAddresses
	// set they are the addresses NodePorts open on; they also say which
	// externalIPs and LoadBalancer IPs are local, so their ports get claimed.
	LocalAddresses []netip.Addr
	// NodePortAddresses is --nodeport-addresses resolved for both families
	// (nodeaddr.Policy.For): where a family's prefixes restrict NodePorts,
	// they open only on local addresses inside them (one rule per address);
	// otherwise on every local address (-m addrtype --dst-type LOCAL).
	NodePortAddresses []netip.Prefix
	// LocalPods are the sources the local-traffic detector takes for this
	// node's pods (--detect-local-mode by cluster or node CIDR). Like the
	// node's own addresses, their connections to a class a Local policy
	// left without endpoints are not dropped: the relays short-circuit
	// them to every endpoint.
	LocalPods []netip.Prefix
	// CheckSocket: every TCP and UDP relay socket is IP_TRANSPARENT, which
	// an unprivileged process cannot set. Redirected TCP and UDP traffic
	// then passes KUBE-PROXY-PORTS only into such a socket, so a proxy port
	// freed by a crash cannot be taken over. False keeps the check to "was
	// redirected" (iptables without -m socket). SCTP keeps that check
	// either way: the socket match cannot look SCTP sockets up.
	CheckSocket bool
}

// Rule is one rule as iptables-save prints it, without the "-A CHAIN" head:
// written in that canonical form, a restore followed by a save round-trips
// it unchanged, which the golden files and kernel tests rely on.
type Rule struct {
	Chain string
	Args  []string
}

// String renders the rule as an iptables-restore line, quoting comments the
// way iptables-save does.
func (r Rule) String() string {
	if len(r.Args) == 0 {
		return "-A " + r.Chain
	}
	return "-A " + r.Chain + " " + restore.JoinRule(r.Args)
}

// Table is the full content of kproxy's chains in one table.
type Table struct {
	Name   string
	Chains []string
	Rules  []Rule
}

// Ruleset is the desired state for one IP family.
type Ruleset struct {
	Family ipfamily.Family
	NAT    Table
	Filter Table
	// Claims are the sockets to hold for this family's NodePorts and local
	// external addresses.
	Claims []Claim
}

// Tables returns the tables in the order they are restored.
func (rs *Ruleset) Tables() []Table { return []Table{rs.NAT, rs.Filter} }

// PortalsFrom pairs every service port of snap with its proxy ports; ports
// proxy does not know (no listener, e.g. SCTP without kernel support) are
// left out.
func PortalsFrom(snap *servicemap.Snapshot, proxy func(servicemap.ServicePortName) (ProxyPorts, bool)) []Portal {
	var out []Portal
	for name, sp := range snap.All() {
		if pp, ok := proxy(name); ok {
			out = append(out, Portal{Port: sp, Proxy: pp})
		}
	}
	return out
}

// Build computes the complete contents of kproxy's chains for one family.
// It is a pure function: the same input gives byte-identical output, in
// service-port-name order. Problems with single service ports (an unknown
// protocol, no host IP for the family) are returned joined, naming the port;
// the Ruleset is still complete for every other port.
func Build(fam ipfamily.Family, node Node, portals []Portal) (*Ruleset, error) {
	rs := &Ruleset{
		Family: fam,
		NAT:    Table{Name: TableNAT, Chains: natChains()},
		Filter: Table{Name: TableFilter, Chains: filterChains()},
	}
	sorted := slices.Clone(portals)
	slices.SortStableFunc(sorted, func(a, b Portal) int { return a.Port.Name.Compare(b.Port.Name) })

	b := builder{fam: fam, node: node, rs: rs, guarded: map[guardKey]bool{}}
	b.hostIP, b.hasHostIP = firstOfFamily(node.HostIPs, fam)
	if cidrs := ipfamily.Prefixes(node.NodePortAddresses, fam); !nodeaddr.MatchAll(cidrs) {
		b.nodePortAddrs = nodeaddr.Select(cidrs, node.LocalAddresses, fam)
		b.nodePortsRestricted = true
	}
	var errs []error
	for _, p := range sorted {
		if p.Port == nil {
			continue
		}
		if err := b.add(p); err != nil {
			errs = append(errs, err)
		}
	}
	rs.Filter.Rules = append(rs.Filter.Rules, b.proxyPortRules()...)
	rs.Filter.Rules = append(rs.Filter.Rules, b.noLocalRules()...)
	groupByChain(&rs.NAT)
	groupByChain(&rs.Filter)
	slices.SortFunc(rs.Claims, compareClaims)
	return rs, errors.Join(errs...)
}

// proxyPortRules is KUBE-PROXY-PORTS, where every packet the node
// receives passes (filter INPUT). Its guards (one per proxy port) turn away
// clients that address a proxy port directly, its refusals new connections
// to traffic classes without endpoints. A packet that met every guard in
// turn made the relays' cost grow with the number of service ports
// (bench-modes: keep-alive requests through REDIRECT portals at 0.14× DNAT's
// rate with 1,000 services, against 0.77× with one), so the chain lets go
// first of what no guard or refusal is for: replies to connections the node
// opened (the relays' to endpoints) and redirected connections once
// established; then, after the refusals, every other redirected packet,
// which the guards (for packets without the DNAT state) would pass anyway.
// A client that reached a proxy port directly, before its guard was
// written, is still refused from then on.
func (b *builder) proxyPortRules() []Rule {
	if len(b.guards) == 0 && len(b.refusals) == 0 {
		return nil
	}
	rule := func(comment string, args ...string) Rule {
		return Rule{Chain: ChainProxyPorts, Args: append([]string{"-m", "comment", "--comment", comment}, args...)}
	}
	established := rule("redirected connections, once established", "-m", "conntrack", "--ctstate", "DNAT", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN")
	if b.node.CheckSocket {
		// A UDP flow stays ESTABLISHED in conntrack as long as datagrams
		// keep coming, across a crash: its datagrams must find kproxy's
		// socket too. (TCP's cannot be taken over: a new socket on the
		// port would only answer them with a reset.)
		established.Args = append([]string{"!", "-p", "udp"}, established.Args...)
	}
	rules := []Rule{
		rule("replies to connections this node opened", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "--ctdir", "REPLY", "-j", "RETURN"),
		established,
	}
	rules = append(rules, b.refusals...)
	if b.node.CheckSocket {
		// --nowildcard: the relays listen on the wildcard address, which
		// the socket match otherwise skips.
		rules = append(rules, rule("redirected connections into kproxy relay sockets", "-m", "conntrack", "--ctstate", "DNAT",
			"-m", "socket", "--transparent", "--nowildcard", "-j", "RETURN"))
	} else {
		rules = append(rules, rule("redirected connections the refusals let through", "-m", "conntrack", "--ctstate", "DNAT", "-j", "RETURN"))
	}
	return append(rules, b.guards...)
}

// noLocalRules is KUBE-PROXY-NO-LOCAL: kube-proxy's "has no local
// endpoints" DROP, which its DNAT of node-local traffic to another node's
// endpoint (the short-circuit of its KUBE-EXT chains) never reaches; here
// such connections return to KUBE-PROXY-PORTS' remaining checks and reach
// the relay, whose picker short-circuits them the same way.
func (b *builder) noLocalRules() []Rule {
	if !b.noLocal {
		return nil
	}
	comment := func(c string) []string { return []string{"-m", "comment", "--comment", c} }
	rules := []Rule{{Chain: ChainNoLocalEndpoints, Args: slices.Concat(comment("this node's traffic goes to every endpoint"),
		[]string{"-m", "addrtype", "--src-type", "LOCAL", "-j", "RETURN"})}}
	for _, p := range ipfamily.Prefixes(b.node.LocalPods, b.fam) {
		// iptables-save prints the source before any match.
		rules = append(rules, Rule{Chain: ChainNoLocalEndpoints, Args: slices.Concat([]string{"-s", p.String()},
			comment("this node's pods' traffic goes to every endpoint"), []string{"-j", "RETURN"})})
	}
	return append(rules, Rule{Chain: ChainNoLocalEndpoints, Args: slices.Concat(comment("no local endpoints"), []string{"-j", "DROP"})})
}

// groupByChain orders a table's rules chain by chain, in declaration order,
// keeping each chain's rule order: the layout iptables-save prints.
func groupByChain(t *Table) {
	slices.SortStableFunc(t.Rules, func(a, b Rule) int {
		return cmp.Compare(slices.Index(t.Chains, a.Chain), slices.Index(t.Chains, b.Chain))
	})
}

type guardKey struct {
	proto string
	port  uint16
}

type builder struct {
	fam       ipfamily.Family
	node      Node
	rs        *Ruleset
	hostIP    netip.Addr
	hasHostIP bool
	// nodePortAddrs are where NodePorts open when nodePortsRestricted.
	nodePortAddrs       []netip.Addr
	nodePortsRestricted bool
	// guarded dedups the open-relay rules: service ports may share a proxy port.
	guarded map[guardKey]bool
	// guards and refusals are KUBE-PROXY-PORTS' rules (proxyPortRules).
	guards, refusals []Rule
	// noLocal: a refusal jumps to ChainNoLocalEndpoints (noLocalRules).
	noLocal bool
}

func (b *builder) add(p Portal) error {
	sp := p.Port
	proto, ok := protocolName(sp.Name.Protocol)
	if !ok {
		return fmt.Errorf("service port %s: protocol %q cannot be redirected", sp.Name, sp.Name.Protocol)
	}
	clusterIPs := ofFamily(sp.ClusterIPs, b.fam)
	if len(clusterIPs) == 0 {
		// The service does not exist in this family (single-stack of the
		// other one), so neither do its NodePorts or external addresses.
		return nil
	}
	if !b.hasHostIP {
		return fmt.Errorf("service port %s: no %s node address to DNAT locally generated traffic to", sp.Name, b.fam)
	}
	comment := portComment(sp.Name)
	if pp := p.Proxy.Internal; pp != 0 {
		for _, ip := range clusterIPs {
			b.portal(ip, netip.Prefix{}, sp.Port, proto, comment, pp)
		}
		b.guard(proto, pp, comment)
		for _, ip := range clusterIPs {
			b.refuse(p.Endpoints.Internal, false, ip, sp.Port, proto, sp.Name, pp)
		}
	}
	pp := p.Proxy.External
	if pp == 0 {
		return nil
	}
	external := false
	state := p.Endpoints.External
	for _, ip := range ofFamily(sp.ExternalIPs, b.fam) {
		b.portal(ip, netip.Prefix{}, sp.Port, proto, comment, pp)
		b.claimIfLocal(ip, sp, proto)
		b.refuse(state, true, ip, sp.Port, proto, sp.Name, pp)
		external = true
	}
	for _, ip := range ofFamily(sp.LoadBalancerIPs, b.fam) {
		if b.loadBalancer(ip, sp, proto, comment, pp) {
			b.refuse(state, true, ip, sp.Port, proto, sp.Name, pp)
		}
		b.claimIfLocal(ip, sp, proto)
		external = true
	}
	if sp.NodePort != 0 {
		for _, dst := range b.nodePort(sp, proto, comment, pp) {
			b.refuse(state, true, dst, sp.NodePort, proto, sp.Name, pp)
		}
		external = true
	}
	if external {
		b.guard(proto, pp, comment)
	}
	return nil
}

// portal steers dst:port to the proxy port, from elsewhere and from the node.
// A valid src limits both rules to that source range.
func (b *builder) portal(dst netip.Addr, src netip.Prefix, port uint16, proto, comment string, proxyPort uint16) {
	match := destMatch(src, dst, proto, comment, port)
	b.rs.NAT.Rules = append(b.rs.NAT.Rules,
		Rule{Chain: ChainPortalsContainer, Args: append(slices.Clone(match), redirectTo(proxyPort)...)},
		Rule{Chain: ChainPortalsHost, Args: append(slices.Clone(match), b.dnatToHost(proxyPort)...)},
	)
}

// loadBalancer writes an LB IP's portals. With loadBalancerSourceRanges only
// sources in the ranges are redirected; everything else still addressed to
// the LB IP afterwards (the nat table rewrote the allowed traffic's
// destination first) is rejected in the filter table, so a refused client
// learns at once instead of its packets being routed on towards the real
// load balancer. Ranges of the other family do not count: a service whose
// ranges are all of the other family admits no source of this one. It
// reports whether any source is redirected.
func (b *builder) loadBalancer(ip netip.Addr, sp *servicemap.ServicePort, proto, comment string, proxyPort uint16) bool {
	if len(sp.LoadBalancerSourceRanges) == 0 {
		b.portal(ip, netip.Prefix{}, sp.Port, proto, comment, proxyPort)
		return true
	}
	redirected := false
	for _, r := range sp.LoadBalancerSourceRanges {
		if ipfamily.Of(r.Addr()) == b.fam {
			b.portal(ip, r.Masked(), sp.Port, proto, comment, proxyPort)
			redirected = true
		}
	}
	args := append(destMatch(netip.Prefix{}, ip, proto, comment, sp.Port), reject(b.fam, proto)...)
	b.rs.Filter.Rules = append(b.rs.Filter.Rules, Rule{Chain: ChainFirewall, Args: args})
	return redirected
}

// nodePort writes the NodePort rules and claims the port, and returns the
// destinations it matched. Without --nodeport-addresses the chains are only
// entered for local destinations (the jump rule's addrtype match), so the
// rules match the port alone: the one destination is the zero Addr.
func (b *builder) nodePort(sp *servicemap.ServicePort, proto, comment string, proxyPort uint16) []netip.Addr {
	var dsts []netip.Addr
	if !b.nodePortsRestricted {
		dsts = []netip.Addr{{}}
	} else {
		dsts = b.nodePortAddrs
	}
	for _, dst := range dsts {
		match := destMatch(netip.Prefix{}, dst, proto, comment, sp.NodePort)
		b.rs.NAT.Rules = append(b.rs.NAT.Rules,
			Rule{Chain: ChainNodePortContainer, Args: append(slices.Clone(match), redirectTo(proxyPort)...)},
			Rule{Chain: ChainNodePortHost, Args: append(slices.Clone(match), b.dnatToHost(proxyPort)...)},
		)
	}
	if len(dsts) > 0 {
		b.rs.Claims = append(b.rs.Claims, Claim{Family: b.fam, Protocol: sp.Name.Protocol, Port: sp.NodePort, Owner: sp.Name})
	}
	return dsts
}

// guard refuses packets that reach proxyPort without having been redirected
// there. REDIRECT is a form of DNAT for conntrack, so redirected traffic
// carries the DNAT state and passes; a client that addresses the proxy port
// directly does not, and is refused instead of being relayed.
func (b *builder) guard(proto string, proxyPort uint16, comment string) {
	k := guardKey{proto, proxyPort}
	if b.guarded[k] {
		return
	}
	b.guarded[k] = true
	args := []string{"-p", proto, "-m", "comment", "--comment", comment, "-m", proto, "--dport", strconv.Itoa(int(proxyPort))}
	if !b.node.CheckSocket || proto == "sctp" {
		args = append(args, "-m", "conntrack", "!", "--ctstate", "DNAT")
	}
	// else: redirected traffic into kproxy's socket has returned already;
	// what reaches this rule was not redirected or would be received by
	// someone else's socket.
	b.guards = append(b.guards, Rule{Chain: ChainProxyPorts, Args: append(args, reject(b.fam, proto)...)})
}

// refuse turns away new connections of a traffic class without endpoints
// (state other than HasEndpoints) that a portal steered from dst:port (a
// zero dst: any local address, for NodePorts) to proxyPort. external: the
// class is External, whose clients on this node a Local policy does not
// bind (noLocalRules).
//
// Where the refusal happens matters, because the nat table has already
// rewritten the destination by the time a filter chain could REJECT. Two
// designs were possible:
//
//   - Leave such ports without portals and REJECT the original destination
//     in filter OUTPUT (the node's own clients) and FORWARD (everyone else).
//     But a cluster IP is not a local address: a packet from another host
//     is only FORWARDed when the node has IP forwarding on and a route for
//     the VIP, neither of which the userspace mode needs or sets up, so
//     those clients would wait for a timeout.
//   - Keep the portal and refuse in filter INPUT, where every portal's
//     traffic arrives: REDIRECT (PREROUTING) and DNAT to the host IP
//     (OUTPUT, then back in over lo) both make it local. This is the one
//     that refuses at once from the client host and from the node itself,
//     whatever the node's forwarding setup.
//
// So the rule lives in KUBE-PROXY-PORTS (filter INPUT), which already
// decides who may reach the proxy ports, and matches the proxy port plus the
// conntrack original destination, so a proxy port shared by two classes or
// services refuses only the destinations without endpoints. The REJECT's
// reset or ICMP error is attached to the connection's conntrack entry, so
// NAT rewrites its source back to the address the client used and the
// client's socket accepts it as the answer. Only NEW connections are
// matched, as kube-proxy does: established ones (kept by the relay while,
// say, every endpoint turned unready) are left alone.
func (b *builder) refuse(state EndpointState, external bool, dst netip.Addr, port uint16, proto string, name servicemap.ServicePortName, proxyPort uint16) {
	var target []string
	switch {
	case state == NoEndpoints:
		target = reject(b.fam, proto)
	case state == NoLocalEndpoints && external:
		// Traffic from this node is short-circuited (noLocalRules).
		target = []string{"-j", ChainNoLocalEndpoints}
		b.noLocal = true
	case state == NoLocalEndpoints:
		target = []string{"-j", "DROP"}
	default:
		return
	}
	// iptables-save prints --ctorigdst without a prefix length.
	args := []string{"-p", proto, "-m", "comment", "--comment", portComment(name) + " " + state.String(),
		"-m", proto, "--dport", strconv.Itoa(int(proxyPort)), "-m", "conntrack", "--ctstate", "NEW"}
	if dst.IsValid() {
		args = append(args, "--ctorigdst", dst.String())
	}
	args = append(args, "--ctorigdstport", strconv.Itoa(int(port)))
	b.refusals = append(b.refusals, Rule{Chain: ChainProxyPorts, Args: append(args, target...)})
}

func (b *builder) claimIfLocal(ip netip.Addr, sp *servicemap.ServicePort, proto string) {
	if slices.Contains(b.node.LocalAddresses, ip) {
		b.rs.Claims = append(b.rs.Claims, Claim{Family: b.fam, Protocol: sp.Name.Protocol, Addr: ip, Port: sp.Port, Owner: sp.Name})
	}
}

// dnatToHost is the target of the OUTPUT-side rules. Locally generated
// traffic cannot be REDIRECTed: REDIRECT in OUTPUT rewrites the destination
// to 127.0.0.1 (::1), while the source the kernel already chose is a real
// node address, and the kernel drops a packet from a non-loopback source to a
// loopback destination as martian. DNAT to a real node address keeps both
// ends routable over lo; the relay (listening on the wildcard address)
// answers from that address and conntrack rewrites the replies back to the
// service IP, so the client sees its reply come from the address it used —
// which UDP clients such as DNS resolvers insist on.
func (b *builder) dnatToHost(proxyPort uint16) []string {
	return []string{"-j", "DNAT", "--to-destination", netip.AddrPortFrom(b.hostIP, proxyPort).String()}
}

// redirectTo is the target of the PREROUTING-side rules: REDIRECT sends the
// packet to the primary address of the interface it arrived on, which is
// where the client's packets already go, so replies leave from the right
// interface and are un-NATed back to the service address.
func redirectTo(proxyPort uint16) []string {
	return []string{"-j", "REDIRECT", "--to-ports", strconv.Itoa(int(proxyPort))}
}

// destMatch renders the match part of a rule in iptables-save order. Zero
// src or dst are omitted.
func destMatch(src netip.Prefix, dst netip.Addr, proto, comment string, port uint16) []string {
	var args []string
	if src.IsValid() {
		args = append(args, "-s", src.String())
	}
	if dst.IsValid() {
		args = append(args, "-d", netip.PrefixFrom(dst, dst.BitLen()).String())
	}
	return append(args, "-p", proto, "-m", "comment", "--comment", comment, "-m", proto, "--dport", strconv.Itoa(int(port)))
}

// reject renders a REJECT target that refuses at once: a TCP reset for TCP
// (the client's connect fails with ECONNREFUSED), port-unreachable otherwise.
func reject(fam ipfamily.Family, proto string) []string {
	switch {
	case proto == "tcp":
		return []string{"-j", "REJECT", "--reject-with", "tcp-reset"}
	case fam == ipfamily.IPv6:
		return []string{"-j", "REJECT", "--reject-with", "icmp6-port-unreachable"}
	default:
		return []string{"-j", "REJECT", "--reject-with", "icmp-port-unreachable"}
	}
}

// portComment is kube-proxy's rule comment for a service port: "ns/svc:port",
// or "ns/svc" for an unnamed port.
func portComment(n servicemap.ServicePortName) string {
	s := n.Namespace + "/" + n.Name
	if n.Port != "" {
		s += ":" + n.Port
	}
	return s
}

func protocolName(p v1.Protocol) (string, bool) {
	switch p {
	case v1.ProtocolTCP:
		return "tcp", true
	case v1.ProtocolUDP:
		return "udp", true
	case v1.ProtocolSCTP:
		return "sctp", true
	}
	return "", false
}

func ofFamily(addrs []netip.Addr, fam ipfamily.Family) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if a.IsValid() && ipfamily.Of(a) == fam {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func firstOfFamily(addrs []netip.Addr, fam ipfamily.Family) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.IsValid() && ipfamily.Of(a) == fam {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

func compareClaims(a, b Claim) int {
	return cmp.Or(
		cmp.Compare(a.Family, b.Family),
		cmp.Compare(a.Protocol, b.Protocol),
		a.Addr.Compare(b.Addr),
		cmp.Compare(a.Port, b.Port),
		a.Owner.Compare(b.Owner),
	)
}
