package syncscale

import (
	"fmt"
	"slices"
	"strings"
)

// Notes explain the table's columns and list what varies per row: how
// long the API objects took to create, the machine's load, and the
// one-change resolution.
func Notes(s Settings, specs []RowSpec, results map[string]Row) []string {
	var modes []Mode
	for _, spec := range specs {
		if !slices.Contains(modes, spec.Mode) {
			modes = append(modes, spec.Mode)
		}
	}
	hasNFT := slices.Contains(modes, NFTables)
	hasIPT := slices.ContainsFunc(modes, func(m Mode) bool { _, ok := m.Backend(); return ok })
	notes := []string{
		fmt.Sprintf("Each row: a fresh network namespace with its own kube-apiserver v1.36 + etcd holding N ClusterIP services (TCP 80 → 8080) of %d ready endpoints each, created through the API before the proxy starts. "+
			"kproxy runs first, then `kproxy --cleanup`, then kube-proxy, both with `--proxy-mode=MODE --iptables-min-sync-period=%v --conntrack-max-per-core=0` (MODE iptables or nftables; kube-proxy v1.36's nftables mode takes the iptables flag, having none of its own); "+
			"every proxy is stopped with its whole process group (and any iptables/nft child left in the namespace) before the next starts.", EndpointsPerSlice, s.MinSyncPeriod),
		"first full sync: process start until kubeproxy_sync_proxy_rules_duration_seconds_count (IPv4) reaches 1, informer lists included; \"rules\": what the full-sync histogram's sum grew by (writing the rules).",
	}
	if hasIPT {
		notes = append(notes,
			"iptables-nft, iptables-legacy: the iptables mode on that backend; after every first sync the rules are checked to be in this backend (iptables-nft-save and iptables-legacy-save). rules: `-A` lines in the nat table after the first sync (kube-proxy's shown when they differ); rule dump: size of the nat and filter tables in iptables-save, which stands in for the full restore payload.",
			fmt.Sprintf("one change in kernel (iptables): one endpoint added to one service's EndpointSlice, until the nat table holds the jump to its KUBE-SEP- chain (the table's version, nf_tables' generation or the legacy table's size, read every %v; `iptables -t nat -S KUBE-SVC-…` after every move); \"sync\": the partial-sync histogram's growth for it.", versionPoll))
	}
	if hasNFT {
		notes = append(notes,
			"nftables: the nftables mode (table `kube-proxy`, ip and ip6); after every first sync the ip table is checked to hold a service chain per service, and both iptables backends no proxy rule. rules: rule lines in the ip kube-proxy table's chains (map and set elements not counted); rule dump: the size of `nft list table ip kube-proxy`.",
			fmt.Sprintf("one change in kernel (nftables): the same endpoint added, until the service chain's rules send to it (in v1.36's rules, an element of the chain's numgen map of endpoints): nf_tables' ruleset generation read every %v (one netlink request), and on every move the chain's rules and their anonymous maps read over netlink (a dump filtered to that chain, a few small replies whatever the table's size) and searched for the endpoint's address and port; the time is when the generation holding it was first seen, and `nft list chain` then confirms it (untimed: nft 1.0.6 loads much of the table to print one chain, 3.4–5.3 s at 10,000 services, so it cannot time the change; `nft monitor` would need every element a sync writes parsed).", versionPoll))
	}
	notes = append(notes,
		fmt.Sprintf("new service answers: a Service and its EndpointSlice created (pointing at a server on a lab backend host) until a client host's TCP connection to the ClusterIP gets the server's answer; median of %d, each after the proxy was idle %v (its burst of syncs back at one per minimum sync period). Until the address is programmed the lab's own nftables chain (forward hook, just before filter priority) resets the connection, so each probe fails at once.", s.NPLRepeats, quietFor(s)),
		"RSS: the proxy process's VmRSS just after its first full sync (VmHWM, the peak so far, in brackets); its ratio is kube-proxy's VmRSS over kproxy's.",
	)
	if hasIPT {
		notes = append(notes, "Targets, iptables rows, marked on kproxy: full sync ≤ 10 s and new service ≤ 1 s at 5,000 services, new service ≤ 2 s at 30,000; smaller sizes are held to the next larger size's target.")
	}
	if hasNFT {
		notes = append(notes, "Targets, nftables rows, marked on kproxy: at 30,000 services (and so at every smaller size) full sync ≤ 10 s, one change in the kernel ≤ 0.1 s, new service ≤ 0.3 s; the ratio cells are marked for being ahead of kube-proxy's nftables mode (above 1×).")
	}
	notes = append(notes, "\"> budget\": the first full sync was still running then and the proxy was stopped; its other numbers could not be measured. \"not run\": the run's "+ProxiesEnv+" left that proxy out.")
	var populate, load []string
	for _, spec := range specs {
		if r, ok := results[spec.Name()]; ok {
			populate = append(populate, fmt.Sprintf("%s %s", spec.Name(), seconds(r.Populate)))
			if r.Load != "" {
				load = append(load, fmt.Sprintf("%s %s → %s", spec.Name(), r.Load, r.LoadAfter))
			}
		}
	}
	if len(populate) > 0 {
		notes = append(notes, "Creating the services and slices took: "+strings.Join(populate, ", ")+".")
	}
	if len(load) > 0 {
		notes = append(notes, "Load average (1, 5, 15 min) once the objects were created → at the row's end: "+strings.Join(load, "; ")+".")
	}
	return notes
}
