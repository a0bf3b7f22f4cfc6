package rules

import (
	"net/netip"
	"slices"

	"kproxy.dev/kproxy/redirect/netfilter/nfacct"

	"kproxy.dev/kproxy/sync/nodeaddr"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// Chains shared by every service port, and the ones kproxy only watches.
const (
	Services         = "KUBE-SERVICES"          // nat: service IPs; filter: refusals for cluster IPs
	ExternalServices = "KUBE-EXTERNAL-SERVICES" // filter: refusals for external destinations
	NodePorts        = "KUBE-NODEPORTS"         // nat: NodePorts; filter: health-check node ports
	Postrouting      = "KUBE-POSTROUTING"       // nat: masquerade marked packets
	MarkMasq         = "KUBE-MARK-MASQ"         // nat: mark a packet for masquerade
	Forward          = "KUBE-FORWARD"           // filter: let marked and established traffic through FORWARD
	ProxyFirewall    = "KUBE-PROXY-FIREWALL"    // filter: LoadBalancer source ranges
	// Canary is created empty in mangle, nat and filter; the mode watches
	// it to notice a flush of the tables by someone else.
	Canary = restore.CanaryChain
	// KubeletFirewall is kubelet's chain; kube-proxy fills it with the same
	// localnet guard when NodePorts answer on localhost. Cleanup keeps it.
	KubeletFirewall = "KUBE-FIREWALL"
)

// nodePortsComment marks the jump(s) closing nat KUBE-SERVICES.
func nodePortsComment() string {
	return restore.CommentMatch("kubernetes service nodeports; NOTE: this must be the last rule in this chain")
}

// buildSharedChains lists the shared chains in the order a restore payload
// declares them (filter, then nat, then mangle, as kube-proxy writes them).
func (b *Builder) buildSharedChains() []SharedChain {
	mark := b.mark + "/" + b.mark
	forward := []string{
		restore.CommentMatch("kubernetes forwarding rules") + ` -m mark --mark ` + mark + ` -j ACCEPT`,
		restore.CommentMatch("kubernetes forwarding conntrack rule") + ` -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
	}
	if !b.cfg.ConntrackTCPBeLiberal {
		// Packets conntrack calls INVALID would otherwise reach a pod
		// un-NATed and be answered with a reset (kubernetes/kubernetes#74839).
		invalid := `-m conntrack --ctstate INVALID -j DROP`
		if b.cfg.NFAcct.CTStateInvalidDropped {
			// Two spaces before the name, as iptables-save prints it.
			invalid = `-m conntrack --ctstate INVALID -m nfacct --nfacct-name  ` + nfacct.CTStateInvalidDropped + ` -j DROP`
		}
		forward = slices.Insert(forward, 0, invalid)
	}
	masquerade := restore.CommentMatch("kubernetes service traffic requiring SNAT") + ` -j MASQUERADE`
	if b.cfg.RandomFully {
		masquerade += " --random-fully"
	}

	chains := []SharedChain{
		{Table: Filter, Name: Services},
		{Table: Filter, Name: ExternalServices},
		{Table: Filter, Name: Forward, Tail: forward},
		{Table: Filter, Name: NodePorts},
		{Table: Filter, Name: ProxyFirewall},
	}
	if b.localhostNodePorts {
		// route_localnet lets martian 127/8 traffic in from the wire;
		// only locally generated or DNATed loopback traffic may pass.
		chains = append(chains, SharedChain{Table: Filter, Name: KubeletFirewall, Tail: []string{
			`! -s 127.0.0.0/8 -d 127.0.0.0/8 ` + restore.CommentMatch("block incoming localnet connections") + ` -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
		}})
	}
	return append(chains,
		SharedChain{Table: Filter, Name: Canary},
		SharedChain{Table: NAT, Name: Services, Tail: b.nodePortsJumps()},
		SharedChain{Table: NAT, Name: NodePorts},
		SharedChain{Table: NAT, Name: Postrouting, Tail: []string{
			`-m mark ! --mark ` + mark + ` -j RETURN`,
			// Clear the mark so a packet that loops through the stack
			// again is not masqueraded twice.
			`-j MARK --set-xmark ` + b.mark + `/0x0`,
			masquerade,
		}},
		SharedChain{Table: NAT, Name: MarkMasq, Tail: []string{`-j MARK --set-xmark ` + mark}},
		SharedChain{Table: NAT, Name: Canary},
		SharedChain{Table: Mangle, Name: Canary},
	)
}

// nodePortsJumps are the rules closing nat KUBE-SERVICES: traffic to a local
// address (or to each --nodeport-addresses address) goes on to
// KUBE-NODEPORTS.
func (b *Builder) nodePortsJumps() []string {
	if b.nodePortsMatchAll {
		switch {
		case b.v6:
			// Localhost NodePorts never work on IPv6.
			return []string{`! -d ::1/128 ` + nodePortsComment() + ` -m addrtype --dst-type LOCAL -j ` + NodePorts}
		case !b.localhostNodePorts:
			return []string{`! -d 127.0.0.0/8 ` + nodePortsComment() + ` -m addrtype --dst-type LOCAL -j ` + NodePorts}
		default:
			return []string{nodePortsComment() + ` -m addrtype --dst-type LOCAL -j ` + NodePorts}
		}
	}
	var out []string
	for _, a := range b.nodePortIPs() {
		out = append(out, `-d `+a.String()+b.hostBits+` `+nodePortsComment()+` -j `+NodePorts)
	}
	return out
}

// nodePortIPs are the interface addresses inside --nodeport-addresses,
// sorted, without loopback addresses NodePorts cannot use.
func (b *Builder) nodePortIPs() []netip.Addr {
	ips := nodeaddr.Select(b.cfg.NodePortAddresses, b.cfg.InterfaceAddrs, b.cfg.Family)
	return slices.DeleteFunc(ips, func(a netip.Addr) bool { return a.IsLoopback() && (b.v6 || !b.localhostNodePorts) })
}

// jumpSpec is one of kube-proxy's jumps from a built-in chain.
type jumpSpec struct {
	table    Table
	from, to string
	newOnly  bool // only connections' first packets (ctstate NEW)
	comment  string
}

// kubeProxyJumps are kube-proxy's jumps in the order it ensures them; each
// is inserted at the top of its chain, so the last one ends up first.
func kubeProxyJumps() []jumpSpec {
	return []jumpSpec{
		{Filter, "INPUT", ExternalServices, true, "kubernetes externally-visible service portals"},
		{Filter, "FORWARD", ExternalServices, true, "kubernetes externally-visible service portals"},
		{Filter, "INPUT", NodePorts, false, "kubernetes health check service ports"},
		{Filter, "FORWARD", Services, true, "kubernetes service portals"},
		{Filter, "OUTPUT", Services, true, "kubernetes service portals"},
		{Filter, "FORWARD", Forward, false, "kubernetes forwarding rules"},
		{Filter, "INPUT", ProxyFirewall, true, "kubernetes load balancer firewall"},
		{Filter, "OUTPUT", ProxyFirewall, true, "kubernetes load balancer firewall"},
		{Filter, "FORWARD", ProxyFirewall, true, "kubernetes load balancer firewall"},
		{NAT, "OUTPUT", Services, false, "kubernetes service portals"},
		{NAT, "PREROUTING", Services, false, "kubernetes service portals"},
		{NAT, "POSTROUTING", Postrouting, false, "kubernetes postrouting rules"},
	}
}

// buildJumps lists the jumps from built-in chains in the order to ensure
// them, each inserted first, which reproduces kube-proxy's layout.
func (b *Builder) buildJumps() []Jump {
	var out []Jump
	for _, j := range kubeProxyJumps() {
		var args []string
		if j.newOnly {
			args = append(args, "-m", "conntrack", "--ctstate", "NEW")
		}
		args = append(args, "-m", "comment", "--comment", j.comment, "-j", j.to)
		out = append(out, Jump{Table: j.table, Chain: j.from, First: true, Args: args})
	}
	if b.localhostNodePorts {
		// kubelet's jumps, which kube-proxy ensures too. Left out when
		// KUBE-FIREWALL is not kproxy's to fill: an empty chain would be
		// a no-op, and kubelet owns it.
		for _, from := range []string{"INPUT", "OUTPUT"} {
			out = append(out, Jump{Table: Filter, Chain: from, First: true, Args: []string{"-j", KubeletFirewall}})
		}
	}
	return out
}

// Rule returns the jump as iptables-save prints it after "-A <Chain> ".
func (j Jump) Rule() string { return restore.JoinRule(j.Args) }
