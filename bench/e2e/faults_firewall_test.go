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

// firewallReload is a firewall reload as one iptables-restore run: one
// transaction per table, so it cannot fail half-way. As separate iptables -F
// and -X commands, kproxy's repair could run between them and put a jump
// back into a flushed chain, and -X then failed (chain busy) on a busy
// machine, failing the test rather than kproxy.
type firewallReload struct {
	payload string
	// noflush keeps what the payload does not touch; without it,
	// iptables-restore empties each table it names, chains and all.
	noflush bool
}

var (
	// emptyFirewall flushes the nat and filter tables and deletes their
	// chains.
	emptyFirewall = firewallReload{payload: "*nat\nCOMMIT\n*filter\nCOMMIT\n"}
	// flushedFirewall flushes them and leaves the chains in place.
	flushedFirewall = firewallReload{payload: "*nat\n-F\nCOMMIT\n*filter\n-F\nCOMMIT\n", noflush: true}
)

// reloadFirewall runs the reload on the node. A failure (a concurrent
// writer's transaction won the race) is tried again: the reload is the
// fault, not what the test checks.
func reloadFirewall(t *testing.T, l *e2eLab, r firewallReload) {
	t.Helper()
	args := []string{"-w"}
	if r.noflush {
		args = append(args, "--noflush")
	}
	var out []byte
	var err error
	for range 5 {
		cmd := l.topo.Node.Command(iptablesTool("iptables-restore"), args...)
		cmd.Stdin = strings.NewReader(r.payload)
		if out, err = cmd.CombinedOutput(); err == nil {
			return
		}
		t.Logf("reloading the firewall: %v (trying again)\n%s", err, out)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("reloading the firewall failed 5 times, last: %v\n%s", err, out)
}

// TestFirewallReloadIsRepaired: a firewall reload that flushes the nat and
// filter tables (deleting the chains, or leaving them in place empty) takes
// the REDIRECT portals and their guards away; kproxy must notice at its next
// periodic sync and put everything back, where it used to wait for the
// hourly full sync. The repair counter shows which did it (the full sync
// counts nothing); how long it took is printed, not asserted.
func TestFirewallReloadIsRepaired(t *testing.T) {
	reloads := []struct {
		name   string
		reload firewallReload
	}{
		{"flush and delete chains", emptyFirewall},
		{"flush, chains left in place", flushedFirewall},
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
				repairs := metricSum(t, "kproxy_userspace_portal_repairs_total")
				reloadFirewall(t, l, reload.reload)
				flushed := time.Now()
				// A periodic sync finds the portals gone and counts the
				// repair; the restore succeeding means they were gone.
				lab.Eventually(t, "the repair to be counted and the service to answer again", func() (bool, string) {
					n := metricSum(t, "kproxy_userspace_portal_repairs_total")
					_, err := ask()
					return n > repairs && err == nil, fmt.Sprintf("repairs %v (before the reload %v), request: %v", n, repairs, err)
				})
				t.Logf("repaired %v after the reload (sync period %v)", time.Since(flushed).Round(10*time.Millisecond), firewallSyncPeriod)
				// The open-relay guard is back too.
				if _, err := lab.UDPAsk(l.topo.Client, nodeIP+":"+udpProxyPort[1], "ping"); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("a datagram straight to proxy port %s after the repair: %v, want it refused", udpProxyPort[1], err)
				}
				l.wantBalanced(t, "UDP ClusterIP after the repair", l.askUDPNewFlows(t, l.topo.Client, echoVIP+":53"))
			})
		}
	})
}
