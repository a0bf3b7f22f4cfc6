package e2e

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// firewallSyncPeriod is the --iptables-sync-period of the firewall-reload
// cases: a reload must be repaired within one.
const firewallSyncPeriod = 2 * time.Second

// TestFirewallReloadIsRepaired: a firewall reload that flushes the nat and
// filter tables (deleting the chains, or leaving them in place empty) takes
// the REDIRECT portals and their guards away; kproxy must notice within one
// sync period and put everything back, where it used to wait for the hourly
// full sync.
func TestFirewallReloadIsRepaired(t *testing.T) {
	reloads := []struct {
		name  string
		flush [][]string // iptables arguments
	}{
		{"flush and delete chains", [][]string{{"-t", "nat", "-F"}, {"-t", "nat", "-X"}, {"-t", "filter", "-F"}, {"-t", "filter", "-X"}}},
		{"flush, chains left in place", [][]string{{"-t", "nat", "-F"}, {"-t", "filter", "-F"}}},
	}
	forModes(t, func(m proxyMode) bool { return m.relays && !m.localPortals }, func(t *testing.T, m proxyMode) {
		for _, reload := range reloads {
			t.Run(reload.name, func(t *testing.T) {
				l := startCoreLab(t, m, fmt.Sprintf("--iptables-sync-period=%s", firewallSyncPeriod))
				if l == nil {
					return
				}
				ask := askHTTP(l.topo.Client, "http://"+webVIP+"/")
				if _, err := ask(); err != nil {
					t.Fatalf("before the reload: %v", err)
				}
				udpProxyPort := regexp.MustCompile(`-d ` + regexp.QuoteMeta(echoVIP) + `/32 .*--to-ports (\d+)`).FindStringSubmatch(l.natRules(t))
				if udpProxyPort == nil {
					t.Fatalf("no portal for %s in\n%s", echoVIP, l.natRules(t))
				}
				for _, args := range reload.flush {
					l.topo.Node.MustExec(iptablesTool("iptables"), args...)
				}
				flushed := time.Now()
				if nat := l.natRules(t); strings.Contains(nat, "-j KUBE-PORTALS-CONTAINER") {
					t.Fatalf("the portals survived the flush: the case tests nothing\n%s", nat)
				}
				lab.Eventually(t, "the service to answer again", func() (bool, string) {
					_, err := ask()
					return err == nil, fmt.Sprint(err)
				})
				repaired := time.Since(flushed)
				t.Logf("repaired %v after the reload (sync period %v)", repaired.Round(10*time.Millisecond), firewallSyncPeriod)
				if repaired > 3*firewallSyncPeriod {
					t.Errorf("repaired %v after the reload, want within about one sync period (%v)", repaired, firewallSyncPeriod)
				}
				if n := metricSum(t, "kproxy_userspace_portal_repairs_total"); n < 1 {
					t.Errorf("kproxy_userspace_portal_repairs_total = %v, want the repair counted", n)
				}
				// The open-relay guard is back too.
				if _, err := lab.UDPAsk(l.topo.Client, nodeIP+":"+udpProxyPort[1], "ping"); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("a datagram straight to proxy port %s after the repair: %v, want it refused", udpProxyPort[1], err)
				}
				l.wantBalanced(t, "UDP ClusterIP after the repair", askUDPNewFlows(t, l.topo.Client, echoVIP+":53"))
			})
		}
	})
}
