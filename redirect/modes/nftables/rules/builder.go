// Package rules builds kube-proxy v1.36's nftables ruleset (table
// "kube-proxy", family ip or ip6) from service-map snapshots: the shared
// part (base chains, static chains and rules, the sets and maps every
// service port adds elements to) and, per service port, its own chains,
// affinity sets and map/set elements. It is pure: the nftables mode
// (redirect/modes/nftables) diffs what it builds and runs the transactions.
//
// Names, rule text and comments are kube-proxy's, written through the same
// knftables objects, so `nft list table` of either proxy reads the same.
package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Config is what the ruleset depends on besides the snapshot, for one
// family. Any change of it changes shared objects: the mode then does a
// full sync.
type Config struct {
	Family ipfamily.Family
	// MasqueradeBit is nftables.masqueradeBit (0-31, default 14).
	MasqueradeBit int
	// MasqueradeAll is --masquerade-all.
	MasqueradeAll bool
	// ClusterCIDRs are the pod ranges of this family that tell local
	// traffic (--cluster-cidr for the ClusterCIDR detector, the Node's pod
	// CIDRs for NodeCIDR); the detector uses the first. Empty: no detector
	// (unless an interface one is set).
	ClusterCIDRs []netip.Prefix
	// BridgeInterface (--pod-bridge-interface) or InterfaceNamePrefix
	// (--pod-interface-name-prefix) tell local traffic by its input
	// interface instead.
	BridgeInterface, InterfaceNamePrefix string
	// NodePortAddresses is --nodeport-addresses resolved for this family
	// (nodeaddr.Policy.For); MatchAll means every local address
	// ("fib daddr type local"), else the nodeport-ips set holds NodePortIPs.
	NodePortAddresses []netip.Prefix
	// NodePortIPs are this node's interface addresses inside
	// NodePortAddresses (nodeaddr.Select), the nodeport-ips set's elements.
	NodePortIPs []netip.Addr
	// NodeIP is kube-proxy's node IP of this family: a LoadBalancer source
	// range that holds it also admits the LoadBalancer IPs as sources.
	NodeIP netip.Addr
	// ServiceCIDRs are the cluster's service ranges of this family: traffic
	// to an unallocated address in them is dropped.
	ServiceCIDRs []netip.Prefix
	// Topology is this node's name and zone for topology hints.
	Topology servicemap.Topology
}

// Equal says whether two configs build the same ruleset.
func (c Config) Equal(o Config) bool {
	return c.Family == o.Family && c.MasqueradeBit == o.MasqueradeBit && c.MasqueradeAll == o.MasqueradeAll &&
		slices.Equal(c.ClusterCIDRs, o.ClusterCIDRs) && slices.Equal(c.NodePortAddresses, o.NodePortAddresses) &&
		slices.Equal(c.NodePortIPs, o.NodePortIPs) && c.NodeIP == o.NodeIP &&
		slices.Equal(c.ServiceCIDRs, o.ServiceCIDRs) && c.Topology == o.Topology &&
		c.BridgeInterface == o.BridgeInterface && c.InterfaceNamePrefix == o.InterfaceNamePrefix
}

// PortsEqual says whether two configs build the same per-port objects:
// the other fields (node-port addresses, service CIDRs, masquerade-all)
// only change shared objects.
func (c Config) PortsEqual(o Config) bool {
	return c.Family == o.Family && c.MasqueradeBit == o.MasqueradeBit && slices.Equal(c.ClusterCIDRs, o.ClusterCIDRs) &&
		c.NodeIP == o.NodeIP && c.Topology == o.Topology &&
		c.BridgeInterface == o.BridgeInterface && c.InterfaceNamePrefix == o.InterfaceNamePrefix
}

// Builder builds objects for one validated Config; it is immutable.
type Builder struct {
	cfg Config
	v6  bool

	ipX         string // "ip" or "ip6"
	addrType    string // "ipv4_addr" or "ipv6_addr"
	noLocalhost string
	mark        string // "0x4000"
	masqRule    string // "mark set mark or 0x4000"
	// ifLocal and ifNotLocal are the detector's matches; empty without one.
	ifLocal, ifNotLocal string
	matchAll            bool
}

// New validates cfg and returns a Builder for it.
func New(cfg Config) (*Builder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Builder{cfg: cfg, v6: cfg.Family == ipfamily.IPv6}
	b.cfg.ClusterCIDRs = slices.Clone(cfg.ClusterCIDRs)
	b.cfg.NodePortAddresses = slices.Clone(cfg.NodePortAddresses)
	b.cfg.NodePortIPs = slices.Clone(cfg.NodePortIPs)
	b.cfg.ServiceCIDRs = slices.Clone(cfg.ServiceCIDRs)
	if b.v6 {
		b.ipX, b.addrType, b.noLocalhost = "ip6", "ipv6_addr", "ip6 daddr != ::1"
	} else {
		b.ipX, b.addrType, b.noLocalhost = "ip", "ipv4_addr", "ip daddr != 127.0.0.0/8"
	}
	b.mark = fmt.Sprintf("%#08x", 1<<uint(cfg.MasqueradeBit))
	b.masqRule = "mark set mark or " + b.mark
	switch {
	case cfg.BridgeInterface != "":
		b.ifLocal, b.ifNotLocal = "iifname "+cfg.BridgeInterface, "iifname != "+cfg.BridgeInterface
	case cfg.InterfaceNamePrefix != "":
		b.ifLocal, b.ifNotLocal = "iifname "+cfg.InterfaceNamePrefix+"*", "iifname != "+cfg.InterfaceNamePrefix+"*"
	case len(cfg.ClusterCIDRs) > 0:
		cidr := cfg.ClusterCIDRs[0].Masked().String()
		b.ifLocal, b.ifNotLocal = b.ipX+" saddr "+cidr, b.ipX+" saddr != "+cidr
	}
	b.matchAll = nodeaddr.MatchAll(cfg.NodePortAddresses)
	return b, nil
}

// Validate says what in c no ruleset can be built from: an unknown family,
// a masquerade bit out of range, a cluster CIDR of the other family, an
// interface name nft would need quoted.
func (c Config) Validate() error {
	if c.Family != ipfamily.IPv4 && c.Family != ipfamily.IPv6 {
		return fmt.Errorf("nftables rules: unknown IP family %q", c.Family)
	}
	if c.MasqueradeBit < 0 || c.MasqueradeBit > 31 {
		return fmt.Errorf("nftables rules: masquerade bit %d is not in 0-31", c.MasqueradeBit)
	}
	for _, p := range c.ClusterCIDRs {
		if !p.IsValid() || ipfamily.Of(p.Addr()) != c.Family {
			return fmt.Errorf("nftables rules: --cluster-cidr %s is not an %s range", p, c.Family)
		}
	}
	for _, name := range []string{c.BridgeInterface, c.InterfaceNamePrefix} {
		if kernelmode.NeedsQuotes(name) {
			return fmt.Errorf("nftables rules: interface name %q has a character nft would need quoted", name)
		}
	}
	return nil
}

// NodePortIPsCount is the number of elements WriteShared puts in
// NodePortIPsSet; -1 when it deletes the set (NodePorts on every address).
func (b *Builder) NodePortIPsCount() int {
	if b.matchAll {
		return -1
	}
	seen := map[netip.Addr]bool{}
	for _, ip := range b.cfg.NodePortIPs {
		if !ip.IsLoopback() {
			seen[ip.Unmap()] = true
		}
	}
	return len(seen)
}

// Config returns the Builder's configuration.
func (b *Builder) Config() Config { return b.cfg }

// baseChain is one of the chains hooked into netfilter.
type baseChain struct {
	name     string
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

var baseChains = [...]baseChain{
	{FilterPreroutingPreDNATChain, knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority + "-10"},
	{FilterOutputPreDNATChain, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-10"},
	{FilterInputChain, knftables.FilterType, knftables.InputHook, knftables.FilterPriority},
	{FilterForwardChain, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority},
	{FilterOutputChain, knftables.FilterType, knftables.OutputHook, knftables.FilterPriority},
	{NATPreroutingChain, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
	{NATOutputChain, knftables.NATType, knftables.OutputHook, knftables.DNATPriority},
	{NATPostroutingChain, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// jumpChain is a jump from a base chain to a regular chain.
type jumpChain struct{ dst, src, extra string }

var jumpChains = [...]jumpChain{
	{NodePortEndpointsCheckChain, FilterInputChain, "ct state new"},
	{ServiceEndpointsCheckChain, FilterInputChain, "ct state new"},
	{ServiceEndpointsCheckChain, FilterForwardChain, "ct state new"},
	{ServiceEndpointsCheckChain, FilterOutputChain, "ct state new"},
	{FirewallCheckChain, FilterPreroutingPreDNATChain, "ct state new"},
	{FirewallCheckChain, FilterOutputPreDNATChain, "ct state new"},
	{ServicesChain, NATOutputChain, ""},
	{ServicesChain, NATPreroutingChain, ""},
	{MasqueradingChain, NATPostroutingChain, ""},
	{ClusterIPsCheckChain, FilterForwardChain, "ct state new"},
	{ClusterIPsCheckChain, FilterOutputChain, "ct state new"},
}

// Containers are the sets and maps holding service ports' elements (every
// one but the affinity sets), in the order a full sync flushes them.
var Containers = [...]Container{
	{ClusterIPsSet, false}, {HairpinConnectionsSet, false},
	{ServiceIPsMap, true}, {ServiceNodePortsMap, true}, {FirewallIPsMap, true},
	{NoEndpointServicesMap, true}, {NoEndpointNodePortsMap, true},
}

// Container is a set or a map.
type Container struct {
	Name string
	Map  bool
}

// CanaryChain is the chain the mode lists to see whether someone flushed
// or deleted the table: it holds exactly CanaryRule.
const CanaryChain = RejectChain

// CanaryRule is CanaryChain's one rule.
const CanaryRule = "reject"

// WriteShared adds to tx everything but the service ports' objects: the
// table, every fixed chain rewritten, the sets and maps and nodeport-ips.
// recreateBase first deletes the base chains, as kube-proxy does once at
// start so that a changed hook priority cannot fail the transaction.
// flushContainers empties the sets and maps service ports fill (a full
// sync adds every element again); without it their elements stay.
func (b *Builder) WriteShared(tx *knftables.Transaction, recreateBase, flushContainers bool) {
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("rules for kube-proxy")})
	if recreateBase {
		for _, bc := range baseChains {
			c := &knftables.Chain{Name: bc.name}
			tx.Add(c)
			tx.Delete(c)
		}
	}
	for _, bc := range baseChains {
		c := &knftables.Chain{Name: bc.name, Type: knftables.PtrTo(bc.typ), Hook: knftables.PtrTo(bc.hook), Priority: knftables.PtrTo(bc.priority)}
		tx.Add(c)
		tx.Flush(c)
	}
	created := map[string]bool{}
	ensure := func(name string, comment *string) {
		if created[name] {
			return
		}
		created[name] = true
		tx.Add(&knftables.Chain{Name: name, Comment: comment})
		tx.Flush(&knftables.Chain{Name: name})
	}
	for _, j := range jumpChains {
		ensure(j.dst, nil)
	}
	for _, name := range []string{ServicesChain, ClusterIPsCheckChain, MasqueradingChain, FirewallCheckChain} {
		ensure(name, nil)
	}
	ensure(RejectChain, knftables.PtrTo("helper for @no-endpoint-services / @no-endpoint-nodeports"))

	tx.Add(&knftables.Set{Name: ClusterIPsSet, Type: b.addrType, Comment: knftables.PtrTo("Active ClusterIPs")})
	tx.Add(&knftables.Set{Name: HairpinConnectionsSet, Type: b.addrType + " . " + b.addrType + " . inet_proto . inet_service",
		Comment: knftables.PtrTo("service hairpin connections")})
	tx.Add(&knftables.Set{Name: NodePortIPsSet, Type: b.addrType, Comment: knftables.PtrTo("IPs that accept NodePort traffic")})
	tx.Add(&knftables.Map{Name: NoEndpointServicesMap, Type: b.addrType + " . inet_proto . inet_service : verdict",
		Comment: knftables.PtrTo("vmap to drop or reject packets to services with no endpoints")})
	tx.Add(&knftables.Map{Name: NoEndpointNodePortsMap, Type: "inet_proto . inet_service : verdict",
		Comment: knftables.PtrTo("vmap to drop or reject packets to service nodeports with no endpoints")})
	tx.Add(&knftables.Map{Name: FirewallIPsMap, Type: b.addrType + " . inet_proto . inet_service : verdict",
		Comment: knftables.PtrTo("destinations that are subject to LoadBalancerSourceRanges")})
	tx.Add(&knftables.Map{Name: ServiceIPsMap, Type: b.addrType + " . inet_proto . inet_service : verdict",
		Comment: knftables.PtrTo("ClusterIP, ExternalIP and LoadBalancer IP traffic")})
	tx.Add(&knftables.Map{Name: ServiceNodePortsMap, Type: "inet_proto . inet_service : verdict", Comment: knftables.PtrTo("NodePort traffic")})
	for _, c := range Containers {
		if !flushContainers {
			break
		}
		if c.Map {
			tx.Flush(&knftables.Map{Name: c.Name})
		} else {
			tx.Flush(&knftables.Set{Name: c.Name})
		}
	}
	// The chains referring to nodeport-ips are flushed above, so it can go.
	if b.matchAll {
		tx.Delete(&knftables.Set{Name: NodePortIPsSet})
	} else {
		tx.Flush(&knftables.Set{Name: NodePortIPsSet})
		for _, ip := range b.cfg.NodePortIPs {
			if ip.IsLoopback() {
				continue // kube-proxy refuses localhost NodePorts in this mode
			}
			tx.Add(&knftables.Element{Set: NodePortIPsSet, Key: []string{ip.Unmap().String()}})
		}
	}

	for _, j := range jumpChains {
		tx.Add(&knftables.Rule{Chain: j.src, Rule: knftables.Concat(j.extra, "jump", j.dst)})
	}
	tx.Add(&knftables.Rule{Chain: MasqueradingChain, Rule: knftables.Concat(
		"mark", "and", b.mark, "!=", "0", "mark", "set", "mark", "xor", b.mark, "masquerade fully-random")})
	tx.Add(&knftables.Rule{Chain: MasqueradingChain, Rule: knftables.Concat(
		"ct status dnat", b.ipX, "saddr", ".", b.ipX, "daddr", ".", "meta l4proto", ".", "th dport", "@", HairpinConnectionsSet,
		"masquerade fully-random")})
	tx.Add(&knftables.Rule{Chain: ClusterIPsCheckChain, Rule: knftables.Concat(b.ipX, "daddr", "@", ClusterIPsSet, "reject"),
		Comment: knftables.PtrTo("Reject traffic to invalid ports of ClusterIPs")})
	if len(b.cfg.ServiceCIDRs) > 0 {
		var cidrs []string
		for _, p := range b.cfg.ServiceCIDRs {
			cidrs = append(cidrs, p.String())
		}
		tx.Add(&knftables.Rule{Chain: ClusterIPsCheckChain, Rule: knftables.Concat(b.ipX, "daddr", "{", strings.Join(cidrs, ","), "}", "drop"),
			Comment: knftables.PtrTo("Drop traffic to unallocated ClusterIPs")})
	}
	tx.Add(&knftables.Rule{Chain: RejectChain, Rule: CanaryRule})
	tx.Add(&knftables.Rule{Chain: ServiceEndpointsCheckChain, Rule: knftables.Concat(
		b.ipX, "daddr", ".", "meta l4proto", ".", "th dport", "vmap", "@", NoEndpointServicesMap)})
	if b.matchAll {
		tx.Add(&knftables.Rule{Chain: NodePortEndpointsCheckChain, Rule: knftables.Concat(
			b.noLocalhost, "meta l4proto . th dport", "vmap", "@", NoEndpointNodePortsMap)})
	} else {
		tx.Add(&knftables.Rule{Chain: NodePortEndpointsCheckChain, Rule: knftables.Concat(
			b.ipX, "daddr", "@", NodePortIPsSet, "meta l4proto . th dport", "vmap", "@", NoEndpointNodePortsMap)})
	}
	tx.Add(&knftables.Rule{Chain: FirewallCheckChain, Rule: knftables.Concat(
		b.ipX, "daddr", ".", "meta l4proto", ".", "th dport", "vmap", "@", FirewallIPsMap)})
	if b.cfg.MasqueradeAll {
		tx.Add(&knftables.Rule{Chain: ServicesChain, Rule: knftables.Concat(b.ipX, "daddr", "@", ClusterIPsSet, b.masqRule),
			Comment: knftables.PtrTo("masquerade all clusterIP traffic")})
	} else if b.ifNotLocal != "" {
		tx.Add(&knftables.Rule{Chain: ServicesChain, Rule: knftables.Concat(b.ipX, "daddr", "@", ClusterIPsSet, b.ifNotLocal, b.masqRule),
			Comment: knftables.PtrTo("masquerade clusterIP traffic from outside cluster")})
	}
	tx.Add(&knftables.Rule{Chain: ServicesChain, Rule: knftables.Concat(
		b.ipX, "daddr", ".", "meta l4proto", ".", "th dport", "vmap", "@", ServiceIPsMap)})
	if b.matchAll {
		tx.Add(&knftables.Rule{Chain: ServicesChain, Rule: knftables.Concat(
			"fib daddr type local", b.noLocalhost, "meta l4proto . th dport", "vmap", "@", ServiceNodePortsMap)})
	} else {
		tx.Add(&knftables.Rule{Chain: ServicesChain, Rule: knftables.Concat(
			b.ipX, "daddr @nodeport-ips", "meta l4proto . th dport", "vmap", "@", ServiceNodePortsMap)})
	}
}

// joinComma joins items as kube-proxy's Concat of "a", ",", "b" does.
func joinComma(items []string) []string {
	var out []string
	for i, s := range items {
		if i > 0 {
			out = append(out, ",")
		}
		out = append(out, s)
	}
	return out
}

var errNilPort = errors.New("service port is nil")

func itoa(n uint16) string { return strconv.Itoa(int(n)) }
