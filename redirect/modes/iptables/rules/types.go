// Package rules builds kube-proxy's iptables-mode rule model from service-map
// snapshots: per service port the chains it owns (KUBE-SVC-*, KUBE-SVL-*,
// KUBE-EXT-*, KUBE-FW-*, KUBE-SEP-*) and the rules it adds to the shared
// chains (KUBE-SERVICES, KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES,
// KUBE-PROXY-FIREWALL), plus the shared chains' fixed rules and the jumps
// from the built-in chains. It is pure: rendering payloads, diffing syncs
// and talking to the kernel belong to the iptables mode (redirect/modes/iptables).
//
// Every rule is rendered exactly as iptables-save prints it (both backends),
// so a dump of the kernel's tables compares as text with what was built.
package rules

import (
	"net/netip"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Table is an iptables table name.
type Table string

const (
	NAT    Table = "nat"
	Filter Table = "filter"
	Mangle Table = "mangle"
)

// Chain is a chain kproxy owns, with its complete rule list. Each rule is the
// text iptables-save prints after "-A <Name> ".
type Chain struct {
	Table Table
	Name  string
	Rules []string
}

// SharedRule is one rule a service port adds to a shared chain. Rules in a
// shared chain are independent of each other's order, and all of them come
// before the chain's fixed Tail (see SharedChain), so a partial sync can
// insert one at position 1 and delete one by its text.
type SharedRule struct {
	Table Table
	Chain string
	Rule  string // as iptables-save prints it after "-A <Chain> "
}

// SharedChain is a chain every service port may add rules to; Tail holds the
// rules that must stay after all of theirs (KUBE-SERVICES' final jump to
// KUBE-NODEPORTS, for instance), Fixed chains (KUBE-MARK-MASQ,
// KUBE-POSTROUTING, KUBE-FORWARD) have only a Tail.
type SharedChain struct {
	Table Table
	Name  string
	Tail  []string
}

// PortRules is everything one service port contributes, for one family.
type PortRules struct {
	Name servicemap.ServicePortName
	// Chains are the port's own chains, listed so that a chain comes after
	// every chain it jumps to (KUBE-SEP-* first, KUBE-SVC-* and the rest
	// after): a restore that creates them in this order never references a
	// chain not yet declared.
	Chains []Chain
	// Shared are the port's rules in shared chains.
	Shared []SharedRule
}

// Jump is a rule in a built-in chain that enters one of kproxy's chains;
// the mode ensures these with go-iptables (check, then insert or append).
type Jump struct {
	Table Table
	Chain string // a built-in chain: PREROUTING, OUTPUT, INPUT, FORWARD, POSTROUTING
	// First: inserted at the top of Chain; otherwise appended.
	First bool
	Args  []string
}

// Config is what the rule model depends on besides the snapshot, for one
// family. Its fields mirror kube-proxy's flags.
type Config struct {
	Family ipfamily.Family
	// MasqueradeBit is --iptables-masquerade-bit (0-31, default 14).
	MasqueradeBit int
	// MasqueradeAll is --masquerade-all: SNAT all traffic sent via
	// service cluster IPs.
	MasqueradeAll bool
	// ClusterCIDRs is --cluster-cidr for this family (the local-traffic
	// detector, "ClusterCIDR" mode): traffic to a cluster IP from outside
	// these ranges is masqueraded. Empty: no detector, as in kube-proxy
	// without --cluster-cidr.
	ClusterCIDRs []netip.Prefix
	// BridgeInterface (--detect-local-mode=BridgeInterface) and
	// InterfaceNamePrefix (InterfaceNamePrefix) are the other detectors:
	// local traffic is what comes in on this interface, or on interfaces
	// with this name prefix. At most one is set; either replaces
	// ClusterCIDRs. (NodeCIDR is ClusterCIDRs set to the Node's pod CIDRs
	// by the mode.)
	BridgeInterface, InterfaceNamePrefix string
	// NodePortAddresses is --nodeport-addresses for this family; empty
	// means every local address (addrtype LOCAL). The special value
	// "primary" has been resolved to NodeIPs by the caller.
	NodePortAddresses []netip.Prefix
	// NodeIPs are this node's addresses of this family. A LoadBalancer
	// source range that contains one of them also admits traffic whose
	// source is the load-balancer IP itself (a node reaching its own VIP).
	NodeIPs []netip.Addr
	// InterfaceAddrs are the addresses on this node's interfaces, of this
	// family. With NodePortAddresses set, KUBE-SERVICES gets one nodeports
	// jump per address inside those prefixes, as kube-proxy does; unused
	// otherwise.
	InterfaceAddrs []netip.Addr
	// LocalhostNodePorts is --iptables-localhost-nodeports (kube-proxy's
	// default is true): NodePorts answer on 127.0.0.0/8 (IPv4 only, and
	// only when NodePortAddresses admits loopback). The mode must then set
	// net.ipv4.conf.all.route_localnet=1, and the model adds kubelet's
	// KUBE-FIREWALL guard, as kube-proxy does.
	LocalhostNodePorts bool
	// NFAcct says which of kube-proxy's nfacct objects exist to count in;
	// rules count in those that do, as kube-proxy's do.
	NFAcct NFAcct
	// ConntrackTCPBeLiberal reports net.netfilter.nf_conntrack_tcp_be_liberal
	// set on the node: kube-proxy then leaves out the KUBE-FORWARD rule
	// dropping ctstate INVALID packets.
	ConntrackTCPBeLiberal bool
	// RandomFully adds --random-fully to MASQUERADE (detected support).
	RandomFully bool
	// LargeCluster is kube-proxy's large-cluster mode, which it enters
	// when all service ports together have more than 1000 endpoints: the
	// KUBE-SEP rules and the rules jumping to them lose their comments,
	// which shrinks the ruleset by up to 40%. Every port's rules change
	// with it, so the mode needs a full sync when it flips.
	LargeCluster bool
	// Topology is this node's name and zone for topology hints.
	Topology servicemap.Topology
}

// NFAcct names the extended-accounting objects the rules count packets in
// (kube-proxy's metrics read them back).
type NFAcct struct {
	// CTStateInvalidDropped counts the packets KUBE-FORWARD drops as
	// conntrack INVALID (nfacct.CTStateInvalidDropped).
	CTStateInvalidDropped bool
	// LocalhostNodePortsAccepted counts the packets accepted on IPv4
	// loopback NodePorts (nfacct.LocalhostNodePortAccept).
	LocalhostNodePortsAccepted bool
}
