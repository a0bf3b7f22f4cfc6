package desired

import (
	"fmt"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Chains of the IPVS mode's iptables layer (kube-proxy's names).
const (
	ChainServices           = "KUBE-SERVICES"
	ChainPostrouting        = "KUBE-POSTROUTING"
	ChainNodePort           = "KUBE-NODE-PORT"
	ChainLoadBalancer       = "KUBE-LOAD-BALANCER"
	ChainMarkMasq           = "KUBE-MARK-MASQ"
	ChainForward            = "KUBE-FORWARD"
	ChainProxyFirewall      = "KUBE-PROXY-FIREWALL"
	ChainSourceRangesFW     = "KUBE-SOURCE-RANGES-FIREWALL"
	ChainIPVSFilter         = "KUBE-IPVS-FILTER"
	ChainIPVSOutFilter      = "KUBE-IPVS-OUT-FILTER"
	tableNAT, tableFilter   = "nat", "filter"
	forwardComment          = "kubernetes forwarding rules"
	servicePortalsComment   = "kubernetes service portals"
	ipvsAccessFilterComment = "kubernetes ipvs access filter"
	proxyFirewallComment    = "kube-proxy firewall rules"
)

// Table is one iptables table's chains, in restore order.
type Table struct {
	Name   string
	Chains []Chain
}

// Chain is a chain the mode owns with its complete rule list; each rule is
// the text iptables-save prints after "-A <Name> ".
type Chain struct {
	Name  string
	Rules []string
}

// Jump is a rule the mode ensures at the top of a built-in chain, as
// iptables-save prints it after "-A <From> ".
type Jump struct {
	Table, From, Rule string
}

func jumps() []Jump {
	j := func(table, from, to, comment string) Jump {
		return Jump{Table: table, From: from, Rule: restore.CommentMatch(comment) + " -j " + to}
	}
	return []Jump{
		j(tableNAT, "OUTPUT", ChainServices, servicePortalsComment),
		j(tableNAT, "PREROUTING", ChainServices, servicePortalsComment),
		j(tableNAT, "POSTROUTING", ChainPostrouting, "kubernetes postrouting rules"),
		j(tableFilter, "FORWARD", ChainForward, forwardComment),
		j(tableFilter, "INPUT", ChainNodePort, "kubernetes health check rules"),
		j(tableFilter, "INPUT", ChainProxyFirewall, proxyFirewallComment),
		j(tableFilter, "FORWARD", ChainProxyFirewall, proxyFirewallComment),
		j(tableFilter, "INPUT", ChainIPVSFilter, ipvsAccessFilterComment),
		j(tableFilter, "OUTPUT", ChainIPVSOutFilter, ipvsAccessFilterComment),
	}
}

// tableWriter collects rules per chain in declaration order.
type tableWriter struct {
	name   string
	chains []Chain
}

func newTable(name string, chains ...string) *tableWriter {
	t := &tableWriter{name: name}
	for _, c := range chains {
		t.chains = append(t.chains, Chain{Name: c})
	}
	return t
}

func (t *tableWriter) add(chain string, parts ...string) {
	for i := range t.chains {
		if t.chains[i].Name == chain {
			t.chains[i].Rules = append(t.chains[i].Rules, strings.Join(parts, " "))
			return
		}
	}
}

// setMatch is "-m set --match-set <name> <flags>", preceded by the set's
// comment when withComment.
func setMatch(s *Set, flags string, withComment bool) string {
	m := "-m set --match-set " + s.Spec.Name + " " + flags
	if withComment {
		m = restore.CommentMatch(s.Spec.Comment) + " " + m
	}
	return m
}

// buildTables writes the static layer, rule for rule kube-proxy's, in
// iptables-save's canonical form. Rules matching a set are only written
// while the set has members, as kube-proxy does.
func buildTables(cfg Config, st *State, noNodeAccess []Entry) []Table {
	v6 := cfg.Family == ipfamily.IPv6
	nat := newTable(tableNAT, ChainServices, ChainPostrouting, ChainNodePort, ChainLoadBalancer, ChainMarkMasq)
	filter := newTable(tableFilter, ChainForward, ChainNodePort, ChainProxyFirewall, ChainSourceRangesFW, ChainIPVSFilter, ChainIPVSOutFilter)
	set := st.Set
	used := func(base string) bool { return len(set(base).Members) > 0 }
	mark := "0x" + strconv.FormatUint(1<<uint(cfg.MasqueradeBit), 16)

	loopback, hostBits, rejectWith := "127.0.0.0/8", "/32", "icmp-port-unreachable"
	if v6 {
		loopback, hostBits, rejectWith = "::1/128", "/128", "icmp6-port-unreachable"
	}
	nat.add(ChainServices, "-s", loopback, "-j RETURN")

	// Set-driven jumps, in kube-proxy's order; a Local set's RETURN comes
	// before its masquerading counterpart.
	for _, j := range []struct {
		table       *tableWriter
		base, chain string
		proto       string
		flags, to   string
	}{
		{nat, SetLoopBack, ChainPostrouting, "", "dst,dst,src", "MASQUERADE"},
		{nat, SetLoadBalancer, ChainServices, "", "dst,dst", ChainLoadBalancer},
		{nat, SetLoadBalancerLocal, ChainLoadBalancer, "", "dst,dst", "RETURN"},
		{nat, SetNodePortLocalTCP, ChainNodePort, "tcp", "dst", "RETURN"},
		{nat, SetNodePortTCP, ChainNodePort, "tcp", "dst", ChainMarkMasq},
		{nat, SetNodePortLocalUDP, ChainNodePort, "udp", "dst", "RETURN"},
		{nat, SetNodePortUDP, ChainNodePort, "udp", "dst", ChainMarkMasq},
		{nat, SetNodePortLocalSCTP, ChainNodePort, "sctp", "dst,dst", "RETURN"},
		{nat, SetNodePortSCTP, ChainNodePort, "sctp", "dst,dst", ChainMarkMasq},
		{filter, SetLoadBalancerFW, ChainProxyFirewall, "", "dst,dst", ChainSourceRangesFW},
		{filter, SetLBSourceCIDR, ChainSourceRangesFW, "", "dst,dst,src", "RETURN"},
		{filter, SetLBSourceIP, ChainSourceRangesFW, "", "dst,dst,src", "RETURN"},
	} {
		if !used(j.base) {
			continue
		}
		rule := setMatch(set(j.base), j.flags, true) + " -j " + j.to
		if j.proto != "" {
			rule = "-p " + j.proto + " " + rule
		}
		j.table.add(j.chain, rule)
	}

	if used(SetClusterIP) {
		m := setMatch(set(SetClusterIP), "dst,dst", true)
		switch {
		case cfg.MasqueradeAll:
			nat.add(ChainServices, m, "-j", ChainMarkMasq)
		case cfg.BridgeInterface != "":
			nat.add(ChainServices, "! -i", cfg.BridgeInterface, m, "-j", ChainMarkMasq)
		case cfg.InterfaceNamePrefix != "":
			nat.add(ChainServices, "! -i", cfg.InterfaceNamePrefix+"+", m, "-j", ChainMarkMasq)
		case len(cfg.ClusterCIDRs) > 0:
			// Off-cluster traffic to a cluster IP may be answered from
			// another node: masquerade it.
			nat.add(ChainServices, "! -s", cfg.ClusterCIDRs[0].Masked().String(), m, "-j", ChainMarkMasq)
		default:
			// Without a detector, masquerade the node's own traffic sourced
			// from a VIP (kube-ipvs0 holds them all, so the kernel picks one).
			nat.add(ChainServices, setMatch(set(SetClusterIP), "src,dst", true), "-j", ChainMarkMasq)
		}
	}
	// External IPs: from off the node (not a bridge, not a local process)
	// or to a local address, accept into IPVS.
	externalAccepts := func(m string) {
		nat.add(ChainServices, m, "-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT")
		nat.add(ChainServices, m, "-m addrtype --dst-type LOCAL -j ACCEPT")
	}
	if used(SetExternalIP) {
		m := setMatch(set(SetExternalIP), "dst,dst", true)
		nat.add(ChainServices, m, "-j", ChainMarkMasq)
		externalAccepts(m)
	}
	if used(SetExternalIPLocal) {
		externalAccepts(setMatch(set(SetExternalIPLocal), "dst,dst", true))
	}
	nat.add(ChainServices, "-m addrtype --dst-type LOCAL -j", ChainNodePort)
	nat.add(ChainLoadBalancer, "-j", ChainMarkMasq)
	filter.add(ChainSourceRangesFW, "-j DROP")
	for _, e := range noNodeAccess {
		ip := e.IP.String() + hostBits
		filter.add(ChainIPVSOutFilter, "-s", ip, "-m ipvs --vproto", protoNumber(string(e.Protocol)),
			"--vaddr", ip, "--vport", strconv.Itoa(int(e.Port)), "-j DROP")
	}
	// Accept what IPVS will take, in case later rules would drop it.
	for _, base := range []string{SetClusterIP, SetLoadBalancer} {
		if used(base) {
			nat.add(ChainServices, setMatch(set(base), "dst,dst", false), "-j ACCEPT")
		}
	}
	filter.add(ChainForward, restore.CommentMatch(forwardComment), "-m mark --mark", mark+"/"+mark, "-j ACCEPT")
	filter.add(ChainForward, restore.CommentMatch("kubernetes forwarding conntrack rule"), "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
	filter.add(ChainNodePort, setMatch(set(SetHealthCheckNP), "dst", true), "-j ACCEPT")
	// A VIP answers only on service ports: refuse new connections to any
	// other port of an address on kube-ipvs0.
	for _, base := range []string{SetLoadBalancer, SetClusterIP, SetExternalIP, SetExternalIPLocal} {
		filter.add(ChainIPVSFilter, setMatch(set(base), "dst,dst", false), "-j RETURN")
	}
	filter.add(ChainIPVSFilter, setMatch(set(SetHealthCheckNP), "dst", false), "-j RETURN")
	filter.add(ChainIPVSFilter, "-m conntrack --ctstate NEW", setMatch(set(SetIPVSAddrs), "dst", false), "-j REJECT --reject-with", rejectWith)

	nat.add(ChainPostrouting, "-m mark ! --mark", mark+"/"+mark, "-j RETURN")
	// Clear the mark so a packet traversing the stack again is not
	// masqueraded twice. MARK's --xor-mark and --or-mark are written in the
	// --set-xmark form iptables-save prints them in.
	nat.add(ChainPostrouting, "-j MARK --set-xmark", mark+"/0x0")
	masq := restore.CommentMatch("kubernetes service traffic requiring SNAT") + " -j MASQUERADE"
	if cfg.RandomFully {
		masq += " --random-fully"
	}
	nat.add(ChainPostrouting, masq)
	nat.add(ChainMarkMasq, "-j MARK --set-xmark", mark+"/"+mark)

	return []Table{{Name: nat.name, Chains: nat.chains}, {Name: filter.name, Chains: filter.chains}}
}

// protoNumber is how iptables-save prints the ipvs match's --vproto.
func protoNumber(p string) string {
	switch strings.ToUpper(p) {
	case "TCP":
		return "6"
	case "UDP":
		return "17"
	case "SCTP":
		return "132"
	}
	return p
}

// RenderTables renders the layer as an iptables-restore payload (and what
// iptables-save would print for these chains).
func RenderTables(tables []Table) string {
	p := restore.NewPayload()
	for _, t := range tables {
		for _, c := range t.Chains {
			p.WriteChain(t.Name, c.Name, c.Rules)
		}
	}
	return p.String()
}

// RestoreJumps turns the jumps into restore's form. kube-proxy prepends
// each one, so of two jumps into a chain the later sits on top.
func RestoreJumps(js []Jump) ([]restore.Jump, error) {
	out := make([]restore.Jump, 0, len(js))
	for _, j := range js {
		args, err := restore.SplitRule(j.Rule)
		if err != nil {
			return nil, fmt.Errorf("jump from %s/%s: %w", j.Table, j.From, err)
		}
		out = append(out, restore.Jump{Table: j.Table, Chain: j.From, First: true, Args: args})
	}
	return out, nil
}
