package guest

import (
	"fmt"
	"os"
	"strings"
)

// DefaultModules are loaded in every guest before the test starts: what the
// three proxy modes, the lab and the SCTP relay use. The kernel would load
// most of them on first use anyway (the guest has modprobe and the module
// tree), but loading them up front makes a missing one fail the boot with
// its name instead of failing some test obscurely.
func DefaultModules() []string {
	return []string{
		// IPv6 is a module in this kernel: without it lo has no ::1.
		"ipv6",
		"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh",
		// SCTP listeners sign their cookies with hmac(md5); the kernel
		// would load hmac at the first listen, which it cannot once a
		// guest without netfilter has disabled module loading.
		"sctp", "hmac",
		"nf_conntrack", "nf_conntrack_netlink", "nf_nat",
		// Legacy iptables only: the guest kernel has no nf_tables for ip/ip6.
		"ip_tables", "iptable_nat", "iptable_filter", "iptable_mangle",
		"ip6_tables", "ip6table_nat", "ip6table_filter", "ip6table_mangle",
		"xt_comment", "xt_tcpudp", "xt_sctp", "xt_addrtype", "xt_conntrack", "xt_mark",
		"xt_statistic", "xt_recent", "xt_multiport", "xt_set",
		"xt_nat", "xt_REDIRECT", "xt_MASQUERADE", "ipt_REJECT", "ip6t_REJECT",
		"ip_set", "ip_set_hash_ip", "ip_set_hash_ipport", "ip_set_hash_ipportip",
		"ip_set_hash_ipportnet", "ip_set_hash_net", "ip_set_bitmap_port",
		"dummy", "veth", "bridge",
		// sock_diag of UDP sockets (a node's kernel loads it on demand):
		// local portals name the holder of a service address with it.
		"udp_diag",
		// The host kernel has br_netfilter built in; the lab's bridged
		// traffic must cross iptables the same way here.
		"br_netfilter",
	}
}

// NoNetfilterModules are loaded in a guest without netfilter
// (Config.NoNetfilter): DefaultModules but the netfilter ones and dummy,
// which only the IPVS mode's kube-ipvs0 needs; leaving it out keeps the
// guest as bare as this host, whose kernel has no dummy links either.
func NoNetfilterModules() []string {
	return []string{"ipv6", "sctp", "hmac", "veth", "bridge", "udp_diag"}
}

// netfilterPrefixes name the netfilter modules (iptables, nf_tables,
// conntrack, NAT, ipset, IPVS, ebtables, arptables, br_netfilter and
// bpfilter, iptables' BPF stand-in): every module of the guest kernel's
// net/*/netfilter directories matches one (TestNetfilterModulesAreNamed).
var netfilterPrefixes = []string{
	"nf_", "nft_", "nfnetlink", "x_tables", "xt_",
	"ip_tables", "iptable_", "ipt_", "ip6_tables", "ip6table_", "ip6t_",
	"arp_tables", "arptable_", "arpt_", "ebtable", "ebt_",
	"ip_set", "ip_vs", "br_netfilter", "bpfilter",
}

// IsNetfilterModule reports whether the kernel module name (as /proc/modules
// spells it, '_' for '-') belongs to netfilter.
func IsNetfilterModule(name string) bool {
	name = strings.ReplaceAll(name, "-", "_")
	for _, p := range netfilterPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// guestModules is what a guest loads: DefaultModules and extra, or without
// netfilter NoNetfilterModules and extra, refusing an extra netfilter one.
func guestModules(extra []string, noNetfilter bool) ([]string, error) {
	if !noNetfilter {
		return mergeModules(DefaultModules(), extra), nil
	}
	for _, m := range extra {
		if IsNetfilterModule(m) {
			return nil, fmt.Errorf("module %s is part of netfilter, which a guest without netfilter must not load", m)
		}
	}
	return mergeModules(NoNetfilterModules(), extra), nil
}

// LoadedNetfilterModules lists the netfilter modules /proc/modules shows.
func LoadedNetfilterModules() ([]string, error) {
	data, err := os.ReadFile("/proc/modules")
	if err != nil {
		return nil, fmt.Errorf("reading the loaded modules: %w", err)
	}
	var mods []string
	for _, line := range strings.Split(string(data), "\n") {
		if name, _, _ := strings.Cut(line, " "); name != "" && IsNetfilterModule(name) {
			mods = append(mods, name)
		}
	}
	return mods, nil
}

// ParseModules splits a comma- or space-separated module list, as the
// -modules flag and KPROXY_GUEST_MODULES give it. Names are checked so one
// cannot smuggle options into modprobe's command line.
func ParseModules(list string) ([]string, error) {
	var mods []string
	for _, m := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if !validModuleName(m) {
			return nil, fmt.Errorf("module name %q: want letters, digits, '_' and '-' only", m)
		}
		mods = append(mods, m)
	}
	return mods, nil
}

func validModuleName(m string) bool {
	if m == "" || m[0] == '-' {
		return false
	}
	for _, r := range m {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// mergeModules appends extra to base, dropping repeats, in order.
func mergeModules(base, extra []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range append(append([]string(nil), base...), extra...) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}
