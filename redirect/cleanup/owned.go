package cleanup

import (
	"strings"

	"kproxy.dev/kproxy/redirect/restore"
	"kproxy.dev/kproxy/sync/mode"
)

var (
	iptablesOnly  = []mode.Name{mode.IPTables}
	ipvsOnly      = []mode.Name{mode.IPVS}
	userspaceOnly = []mode.Name{mode.Userspace}
	// iptables and ipvs mode program chains of the same names; whichever
	// runs keeps them.
	iptablesAndIPVS = []mode.Name{mode.IPTables, mode.IPVS}
	// Probe leftovers belong to no mode: always removed.
	noMode []mode.Name
)

// ownedChain is a chain (or, with prefix, a family of chains) some proxy
// mode creates in one table.
type ownedChain struct {
	table  string
	name   string
	prefix bool
	modes  []mode.Name
}

// ownedChains lists every chain a kube-proxy or kproxy mode creates. Chains
// kubelet creates (KUBE-FIREWALL and KUBE-KUBELET-CANARY in filter,
// KUBE-MARK-DROP in nat, KUBE-IPTABLES-HINT in mangle) are deliberately
// absent: other components depend on them.
var ownedChains = []ownedChain{
	// iptables mode.
	{table: "nat", name: "KUBE-SERVICES", modes: iptablesAndIPVS},
	{table: "nat", name: "KUBE-POSTROUTING", modes: iptablesAndIPVS},
	{table: "nat", name: "KUBE-MARK-MASQ", modes: iptablesAndIPVS},
	{table: "nat", name: "KUBE-NODEPORTS", modes: iptablesOnly},
	{table: "nat", name: "KUBE-SVC-", prefix: true, modes: iptablesOnly},
	{table: "nat", name: "KUBE-SVL-", prefix: true, modes: iptablesOnly},
	{table: "nat", name: "KUBE-EXT-", prefix: true, modes: iptablesOnly},
	{table: "nat", name: "KUBE-FW-", prefix: true, modes: iptablesOnly},
	{table: "nat", name: "KUBE-SEP-", prefix: true, modes: iptablesOnly},
	{table: "nat", name: "KUBE-XLB-", prefix: true, modes: iptablesOnly}, // before 1.24
	{table: "nat", name: restore.CanaryChain, modes: iptablesOnly},
	{table: "filter", name: "KUBE-SERVICES", modes: iptablesOnly},
	{table: "filter", name: "KUBE-EXTERNAL-SERVICES", modes: iptablesOnly},
	{table: "filter", name: "KUBE-NODEPORTS", modes: iptablesOnly},
	{table: "filter", name: "KUBE-FORWARD", modes: iptablesAndIPVS},
	{table: "filter", name: "KUBE-PROXY-FIREWALL", modes: iptablesAndIPVS},
	{table: "filter", name: restore.CanaryChain, modes: iptablesOnly},
	{table: "mangle", name: restore.CanaryChain, modes: iptablesOnly},

	// ipvs mode.
	{table: "nat", name: "KUBE-NODE-PORT", modes: ipvsOnly},
	{table: "nat", name: "KUBE-LOAD-BALANCER", modes: ipvsOnly},
	{table: "nat", name: "KUBE-FIREWALL", modes: ipvsOnly}, // nat only; filter's is kubelet's
	{table: "filter", name: "KUBE-NODE-PORT", modes: ipvsOnly},
	{table: "filter", name: "KUBE-SOURCE-RANGES-FIREWALL", modes: ipvsOnly},
	{table: "filter", name: "KUBE-IPVS-FILTER", modes: ipvsOnly},
	{table: "filter", name: "KUBE-IPVS-OUT-FILTER", modes: ipvsOnly},

	// userspace mode.
	{table: "nat", name: "KUBE-PORTALS-CONTAINER", modes: userspaceOnly},
	{table: "nat", name: "KUBE-PORTALS-HOST", modes: userspaceOnly},
	{table: "nat", name: "KUBE-NODEPORT-CONTAINER", modes: userspaceOnly},
	{table: "nat", name: "KUBE-NODEPORT-HOST", modes: userspaceOnly},
	{table: "filter", name: "KUBE-NODEPORT-NON-LOCAL", modes: userspaceOnly},
	{table: "filter", name: "KUBE-PROXY-PORTS", modes: userspaceOnly},
	{table: "filter", name: "KUBE-PORTALS-FIREWALL", modes: userspaceOnly},

	// Feature-probe leftovers (kernel.ProbeChain), in any table.
	{table: "*", name: "KPROXY-PROBE", modes: noMode},
}

// chainOwner returns the modes that own chain in table, and whether any
// mode (or the prober) owns it at all.
func chainOwner(table, chain string) ([]mode.Name, bool) {
	for _, o := range ownedChains {
		if o.table != table && o.table != "*" {
			continue
		}
		if chain == o.name || (o.prefix && strings.HasPrefix(chain, o.name)) {
			return o.modes, true
		}
	}
	return nil, false
}

// removeChain says whether cleanup keeping mode keep removes chain from table.
func removeChain(table, chain string, keep mode.Name) bool {
	modes, owned := chainOwner(table, chain)
	return owned && !contains(modes, keep)
}

// ownedChainKept says whether chain belongs to the kept mode: such chains
// stay, but lose rules pointing at what is removed.
func ownedChainKept(table, chain string, keep mode.Name) bool {
	modes, owned := chainOwner(table, chain)
	return owned && contains(modes, keep)
}

func contains(modes []mode.Name, m mode.Name) bool {
	for _, x := range modes {
		if x == m {
			return true
		}
	}
	return false
}

// ipvsSetNames are the ipsets kube-proxy's ipvs mode creates; the IPv6
// variants carry a "6-" after "KUBE-" (KUBE-6-CLUSTER-IP).
var ipvsSetNames = []string{
	"KUBE-LOOP-BACK",
	"KUBE-CLUSTER-IP",
	"KUBE-EXTERNAL-IP",
	"KUBE-EXTERNAL-IP-LOCAL",
	"KUBE-LOAD-BALANCER",
	"KUBE-LOAD-BALANCER-LOCAL",
	"KUBE-LOAD-BALANCER-FW",
	"KUBE-LOAD-BALANCER-SOURCE-IP",
	"KUBE-LOAD-BALANCER-SOURCE-CIDR",
	"KUBE-NODE-PORT-TCP",
	"KUBE-NODE-PORT-LOCAL-TCP",
	"KUBE-NODE-PORT-UDP",
	"KUBE-NODE-PORT-LOCAL-UDP",
	"KUBE-NODE-PORT-SCTP-HASH",
	"KUBE-NODE-PORT-LOCAL-SCTP-HASH",
	"KUBE-HEALTH-CHECK-NODE-PORT",
	"KUBE-IPVS-IPS",
}

// ipvsSetPrefixes cover set names future or past versions derive from the
// same families.
var ipvsSetPrefixes = []string{"KUBE-NODE-PORT-", "KUBE-LOAD-BALANCER-", "KUBE-EXTERNAL-IP-"}

// isIPVSSet says whether an ipset belongs to ipvs mode.
func isIPVSSet(name string) bool {
	name = strings.Replace(name, "KUBE-6-", "KUBE-", 1)
	for _, n := range ipvsSetNames {
		if name == n {
			return true
		}
	}
	for _, p := range ipvsSetPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// removeSet says whether cleanup keeping mode keep destroys the ipset name.
func removeSet(name string, keep mode.Name) bool {
	if name == probeSet {
		return true
	}
	return keep != mode.IPVS && isIPVSSet(name)
}
