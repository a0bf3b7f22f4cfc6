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
		link := strings.TrimSpace(client.MustExec("sh", "-c", "ip -o -4 route get "+nodeIP+" | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'"))
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
		kind, other := "redirect", "local"
		if m.localPortals {
			kind, other = other, kind
		}
		samples, err := lab.MetricSamples("kproxy_userspace_portals")
		if err != nil {
			t.Fatal(err)
		}
		want := `kproxy_userspace_portals{family="IPv4",portals="` + kind + `"} 1`
		if !slices.Contains(samples, want) || slices.ContainsFunc(samples, func(s string) bool { return strings.Contains(s, `portals="`+other+`"`) }) {
			t.Fatalf("portal kind samples %q, want %q and no %s portals", samples, want, other)
		}
		if !m.localPortals {
			return
		}
		// Where netfilter is absent, kproxy says so once and logs no
		// error about it (or anything else).
		log := l.kproxy.Log()
		for _, line := range strings.Split(log, "\n") {
			if strings.HasPrefix(line, "E") {
				t.Errorf("kproxy logged an error with local portals: %s", line)
			}
		}
		if guest.WithoutNetfilter() && strings.Count(log, "nf_conntrack is absent") != 1 {
			t.Errorf("kproxy did not say once that nf_conntrack is absent:\n%s", log)
		}
	})
}
