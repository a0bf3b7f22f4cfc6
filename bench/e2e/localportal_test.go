package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

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
