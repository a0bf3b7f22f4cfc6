package e2e

import (
	"os"
	"testing"

	"kproxy.dev/kproxy/bench/guest"
)

// proxyMode is one --proxy-mode the suite runs, with the traits that decide
// which assertions apply to it. Cases assert on traits rather than names, so
// a new mode states what it is once, here.
type proxyMode struct {
	// name is the subtest's name; flag, when set, the --proxy-mode value
	// (else name), and args further flags.
	name string
	flag string
	args []string
	// exactRoundRobin: new connections go to the endpoints in turn (the
	// userspace balancer). Otherwise the kernel picks one at random, and
	// only "every endpoint is reached" can be asserted.
	exactRoundRobin bool
	// relays: traffic passes through kproxy's own sockets (proxy ports
	// reached through portal rules, NodePorts held with real sockets), so
	// backends on other nodes see the node as the source (those on this
	// node see the client's, keepsClientAddress); its LoadBalancer
	// source-range firewall rejects where kube-proxy's drops.
	relays bool
	// keepsClientAddress: under externalTrafficPolicy=Local the endpoint
	// (on this node) sees the client's address: kernel NAT leaves it in
	// place, the userspace relays dial from it (lb/keepsource).
	keepsClientAddress bool
	// iptablesRules: kube-proxy's iptables rule model, written with
	// iptables-restore, checked through canary chains, and counted in the
	// kubeproxy_sync_proxy_rules_iptables_* metrics.
	iptablesRules bool
	// nftablesRules: kube-proxy's nftables ruleset, in the table kube-proxy
	// of the ip and ip6 families, written in nft transactions and counted
	// in the kubeproxy_sync_proxy_rules_nftables_* metrics.
	nftablesRules bool
	// localHairpinsOnly: a pod sent to itself through a service is
	// masqueraded only when it is an endpoint on this node (kube-proxy's
	// IPVS KUBE-LOOP-BACK, its nftables hairpin-connections set); the
	// iptables mode masquerades such traffic for every endpoint.
	localHairpinsOnly bool
	// primaryNodePorts: without --nodeport-addresses, NodePorts answer only
	// on the node's primary address (kube-proxy's default in the nftables
	// mode), not on every local address.
	primaryNodePorts bool
	// virtualServers: services are IPVS virtual servers with their
	// addresses on kube-ipvs0 (real servers drain gracefully).
	virtualServers bool
	// localPortals: the userspace mode with no netfilter rule at all:
	// service addresses are local routes and the relays listen on them.
	localPortals bool
	// steered: local portals whose service ports a socket-lookup program
	// hands to the relays' shared sockets (--userspace-portals=sklookup).
	steered bool
	// auto: kproxy runs without --proxy-mode, choosing by itself.
	auto bool
	// sctpOnlyInGuest: in the guest kernel with netfilter, the mode runs
	// only the SCTP cases (forModesWithSCTP), which no other kernel here
	// can run. Its other cases would repeat, at several times the cost,
	// what other suites cover: the host runs every case in every mode, and
	// the cases the guest kernel ran on the legacy backend again on that
	// backend (legacyIPTables); the guest without netfilter runs the local
	// portals on this same kernel.
	sctpOnlyInGuest bool
}

// proxyModeFlag is the --proxy-mode value of m; "" means none (automatic).
func (m proxyMode) proxyModeFlag() string {
	if m.flag != "" || m.auto {
		return m.flag
	}
	return m.name
}

// nftablesMode is the nftables mode as the suite runs it: no minimum
// interval between syncs (the mode's own flag), so changes land at once.
func nftablesMode() proxyMode {
	return proxyMode{name: "nftables", args: []string{"--nftables-min-sync-period=0"},
		keepsClientAddress: true, nftablesRules: true, primaryNodePorts: true, localHairpinsOnly: true}
}

// proxyModes lists the modes every case runs in, in run order: the modes
// this kernel can run. The host has no IPVS; in the guest kernel (make
// test-guest, which picks the cases that apply) the IPVS mode joins, and
// the modes that write iptables rules run on the legacy backend, the only
// one there, as they do on the host under envIPTablesBackend. The
// nftables mode runs on the host only: the guest kernel loads nf_tables
// but is built without its ip, ip6 and inet families
// (TestGuestNFTablesHasNoIPFamilies in bench/guest checks it, and fails
// once they appear, to add the mode to the guest runs here).
func proxyModes() []proxyMode {
	redirect := proxyMode{name: "userspace", args: []string{"--userspace-portals=redirect"}, exactRoundRobin: true, relays: true,
		keepsClientAddress: true}
	iptables := proxyMode{name: "iptables", keepsClientAddress: true, iptablesRules: true}
	if !guest.InGuest() && legacyIPTables() {
		// The modes that write iptables rules, on the legacy backend.
		return []proxyMode{redirect, iptables}
	}
	modes := []proxyMode{
		redirect,
		{name: "userspace-local", flag: "userspace", args: []string{"--userspace-portals=local"},
			exactRoundRobin: true, relays: true, localPortals: true, keepsClientAddress: true},
		{name: "userspace-sklookup", flag: "userspace", args: []string{"--userspace-portals=sklookup"},
			exactRoundRobin: true, relays: true, localPortals: true, steered: true, keepsClientAddress: true},
		iptables,
	}
	if guest.WithoutNetfilter() {
		// A node whose kernel has no netfilter: kproxy, left to choose,
		// must pick the userspace mode with local portals.
		return []proxyMode{{name: "auto", auto: true, exactRoundRobin: true, relays: true, localPortals: true, steered: true,
			keepsClientAddress: true}}
	}
	if guest.InGuest() {
		for i := range modes {
			modes[i].sctpOnlyInGuest = true
		}
		return append(modes, proxyMode{name: "ipvs", keepsClientAddress: true, virtualServers: true, localHairpinsOnly: true})
	}
	return append(modes, nftablesMode())
}

// envIPTablesBackend=legacy runs the suite on the host in the modes that
// write iptables rules, with kproxy on the legacy backend (make
// test-e2e-legacy): the cases the guest kernel, whose only backend it is,
// ran in them, at a fraction of the guest's cost.
const envIPTablesBackend = "KPROXY_E2E_IPTABLES_BACKEND"

// legacyIPTables says whether kproxy writes its iptables rules with the
// legacy backend here: in the guest kernel, which has no other, and on the
// host under envIPTablesBackend=legacy (newLabOn marks the node for it as
// kubelet would).
func legacyIPTables() bool {
	return guest.InGuest() || os.Getenv(envIPTablesBackend) == "legacy"
}

// forEachMode runs body as one subtest per proxy mode.
func forEachMode(t *testing.T, body func(t *testing.T, m proxyMode)) {
	t.Helper()
	forModes(t, func(proxyMode) bool { return true }, body)
}

// forModes runs body as one subtest per proxy mode that applies; the other
// modes get no subtest, as the case means nothing for them.
func forModes(t *testing.T, applies func(proxyMode) bool, body func(t *testing.T, m proxyMode)) {
	t.Helper()
	runModes(t, func(m proxyMode) bool { return applies(m) && !m.sctpOnlyInGuest }, body)
}

// forModesWithSCTP is forModes for the SCTP cases, which run in every mode
// that applies (see sctpOnlyInGuest).
func forModesWithSCTP(t *testing.T, applies func(proxyMode) bool, body func(t *testing.T, m proxyMode)) {
	t.Helper()
	runModes(t, applies, body)
}

func runModes(t *testing.T, applies func(proxyMode) bool, body func(t *testing.T, m proxyMode)) {
	t.Helper()
	if b := os.Getenv(envIPTablesBackend); b != "" && b != "legacy" {
		t.Fatalf("%s=%q: the only value is legacy", envIPTablesBackend, b)
	}
	ran := false
	for _, m := range proxyModes() {
		if applies(m) {
			ran = true
			t.Run(m.name, func(t *testing.T) { body(t, m) })
		}
	}
	if !ran {
		t.Skip("no proxy mode has the traits this case needs")
	}
}
