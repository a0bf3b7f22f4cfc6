package syncscale

import (
	"fmt"
	"strings"
)

// Notes explain the table's columns and list what varies per row: how
// long the API objects took to create, and the one-change resolution.
func Notes(s Settings, specs []RowSpec, results map[string]Row) []string {
	notes := []string{
		fmt.Sprintf("Each row: a fresh network namespace with its own kube-apiserver v1.36 + etcd holding N ClusterIP services (TCP 80 → 8080) of %d ready endpoints each, created through the API before the proxy starts. "+
			"kproxy runs first, then `kproxy --cleanup`, then kube-proxy, both with `--proxy-mode=iptables --iptables-min-sync-period=%v --conntrack-max-per-core=0`; "+
			"after every first sync the rules are checked to be in this row's backend (iptables-nft-save and iptables-legacy-save).", EndpointsPerSlice, s.MinSyncPeriod),
		"first full sync: process start until kubeproxy_sync_proxy_rules_duration_seconds_count (IPv4) reaches 1, informer lists included; \"rules\": what the full-sync histogram's sum grew by (writing the rules).",
		"nat rules: `-A` lines in the nat table after the first sync (kube-proxy's shown when they differ); nat+filter save: size of those tables in iptables-save, which stands in for the full restore payload.",
		fmt.Sprintf("one change in kernel: one endpoint added to one service's EndpointSlice, until the nat table holds the jump to its KUBE-SEP- chain (the table's version, nf_tables' generation or the legacy table's size, read every %v; `iptables -t nat -S KUBE-SVC-…` after every move); \"sync\": the partial-sync histogram's growth for it.", versionPoll),
		fmt.Sprintf("new service answers: a Service and its EndpointSlice created (pointing at a server on a lab backend host) until a client host's TCP connection to the ClusterIP gets the server's answer; median of %d, each after the proxy was idle %v.", s.NPLRepeats, quietFor),
		"Targets (issue 4), marked on kproxy: full sync ≤ 10 s and new service ≤ 1 s at 5,000 services, new service ≤ 2 s at 30,000; smaller sizes are held to the next larger size's target. " +
			"\"> budget\": kube-proxy's first full sync was still running then and was stopped; its other numbers could not be measured.",
	}
	var populate []string
	for _, spec := range specs {
		if r, ok := results[spec.Name()]; ok {
			populate = append(populate, fmt.Sprintf("%s %s", spec.Name(), seconds(r.Populate)))
		}
	}
	if len(populate) > 0 {
		notes = append(notes, "Creating the services and slices took: "+strings.Join(populate, ", ")+".")
	}
	return notes
}
