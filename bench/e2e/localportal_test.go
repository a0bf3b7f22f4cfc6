package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/guest"

	"kproxy.dev/kproxy/bench/lab"
)

// TestServiceAddressesNotAnnounced: a host on the node's link that asks ARP
// for a cluster IP gets no answer. With local portals the cluster IPs are
// local to the node, which would answer for them like for its own addresses
// unless told not to (kube-proxy's strict ARP). The IPVS mode is left out:
// without --ipvs-strict-arp it answers, as kube-proxy's does.
func TestServiceAddressesNotAnnounced(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return !m.virtualServers }, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		client := l.topo.Client
		l.wantBalanced(t, "the cluster IP through the node, as routed", askHTTP(client, "http://"+webVIP+"/"))
		// Send the cluster IP's traffic as if it were on the link: the
		// client must resolve it with ARP first.
		const link = "eth0" // the client's link to the node (lab.NewTopology)
		client.MustExec("ip", "route", "replace", webVIP+"/32", "dev", link)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if conn, err := client.DialContext(ctx, "tcp", webVIP+":80"); err == nil {
			conn.Close()
			t.Fatalf("the node answered ARP for cluster IP %s: a connection on the link succeeded", webVIP)
		}
		neigh := client.MustExec("ip", "neigh", "show", webVIP, "dev", link)
		if strings.Contains(neigh, "lladdr") {
			t.Fatalf("the client learnt a link-layer address for cluster IP %s: %s", webVIP, neigh)
		}
		t.Logf("ARP for %s on %s: %q (no answer)", webVIP, link, strings.TrimSpace(neigh))
		client.MustExec("ip", "route", "del", webVIP+"/32", "dev", link)
		lab.Eventually(t, "the cluster IP answering through the node again", func() (bool, string) {
			answer, err := askHTTP(client, "http://"+webVIP+"/")()
			return err == nil && l.isBackend(answer), answer
		})
	})
}

// TestPortalKind: kproxy_userspace_portals says which portal kind runs, and
// a node without netfilter runs local portals without being told to.
func TestPortalKind(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.relays }, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		kind := "redirect"
		switch {
		case m.steered:
			kind = "sklookup"
		case m.localPortals:
			kind = "local"
		}
		samples, err := lab.MetricSamples("kproxy_userspace_portals")
		if err != nil {
			t.Fatal(err)
		}
		want := `kproxy_userspace_portals{family="IPv4",portals="` + kind + `"} 1`
		if !slices.Contains(samples, want) || slices.ContainsFunc(samples, func(s string) bool { return !strings.Contains(s, `portals="`+kind+`"`) }) {
			t.Fatalf("portal kind samples %q, want %q and no other kind", samples, want)
		}
		if !m.localPortals {
			return
		}
		// Where netfilter is absent, kproxy says so once and logs no
		// error about it (or anything else but kube-proxy's advice on an
		// unset --nodeport-addresses, an error in kube-proxy's log too).
		log := l.kproxy.Log()
		for _, line := range strings.Split(log, "\n") {
			if strings.HasPrefix(line, "E") && !strings.Contains(line, "nodePortAddresses is unset") {
				t.Errorf("kproxy logged an error with local portals: %s", line)
			}
		}
		if guest.WithoutNetfilter() && strings.Count(log, "nf_conntrack is absent") != 1 {
			t.Errorf("kproxy did not say once that nf_conntrack is absent:\n%s", log)
		}
	})
}

// TestSwitchFromLocalPortals: kproxy started in another mode on a node the
// userspace mode's local portals ran on removes their routes, and only
// theirs, before it serves.
func TestSwitchFromLocalPortals(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.localPortals && !m.auto }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		node := l.topo.Node
		node.MustExec("ip", "route", "add", "local", "198.18.9.9/32", "dev", "lo", "table", "local")
		l.runKproxy(t, nil)
		lab.Eventually(t, "the local portals' routes", func() (bool, string) { return l.programs(t, webVIP) })
		if err := l.kproxy.Stop(); err != nil {
			t.Logf("stopping kproxy: %v", err)
		}
		// The next kproxy runs the iptables mode on the same node.
		l.mode = proxyMode{name: "iptables", keepsClientAddress: true, iptablesRules: true}
		l.runKproxy(t, nil)
		if routes := node.MustExec("ip", "route", "show", "table", "local", "proto", "107"); routes != "" {
			t.Errorf("the local portals' routes outlived the switch to the iptables mode:\n%s", routes)
		}
		if routes := node.MustExec("ip", "route", "show", "table", "local", "198.18.9.9"); !strings.Contains(routes, "198.18.9.9") {
			t.Error("the switch removed a local route kproxy did not add")
		}
		l.wantBalanced(t, "the cluster IP in the iptables mode", askHTTP(l.topo.Client, "http://"+webVIP+"/"))
	})
}
