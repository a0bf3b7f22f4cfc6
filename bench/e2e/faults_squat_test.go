package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// TestSquattedServicePortIsReported: with local portals each service port
// is an ordinary socket on the service address, so a local user who binds
// the port on every address before kproxy starts holds it, and receives
// the service's traffic there. kproxy cannot prevent that with these
// portals; it must say so: the start-up log names the exposure, the log
// names the holder (address, uid, socket inode) once, the conflict is
// counted in kproxy_userspace_portal_conflicts and listed in /healthz
// (still 200). Once the squatter closes, the next sync serves the port and
// the count drops to 0.
func TestSquattedServicePortIsReported(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.localPortals }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		squatter := l.startHijacker(t, "", 9002) // 0.0.0.0:9002, as uid 65534
		defer squatter.Stop()
		if strings.Contains(squatter.Log(), "bind failed") {
			t.Fatalf("the squatter could not bind: %s", squatter.Log())
		}
		inodes := socketInodes(t, squatter.Pid())
		// A short sync period: the retry that finds the port free comes
		// from the periodic sync.
		l.runKproxy(t, nil, "--iptables-sync-period=2s")

		conflicts := `kproxy_userspace_portal_conflicts{protocol="TCP"}`
		lab.Eventually(t, "the squatted service port counted", func() (bool, string) {
			n := metricSum(t, conflicts)
			return n == 1, fmt.Sprintf("%s %v", conflicts, n)
		})
		status, body, err := lab.HTTPGetStatus(l.topo.Node, "http://"+nodeIP+":10256/healthz")
		held := "TCP " + digestVIP + ":9002 of default/digest:digest/TCP held by uid 65534"
		if err != nil || status != 200 || !strings.Contains(body, `"portalConflicts":1`) || !strings.Contains(body, held) {
			t.Errorf("/healthz = %d %q, %v; want 200 with portalConflicts 1 naming %q", status, body, err, held)
		}
		log := l.kproxy.Log()
		if !strings.Contains(log, "Any local user can bind a service address") {
			t.Errorf("the start-up log does not name the local portals' exposure:\n%s", lastLines(log, 40))
		}
		reported := regexp.MustCompile(`NOT served by kproxy.*address="`+regexp.QuoteMeta(digestVIP)+`:9002".*uid 65534 \(socket inode (\d+) bound to 0\.0\.0\.0:9002\)`).FindAllStringSubmatch(log, -1)
		switch {
		case len(reported) != 1:
			t.Errorf("the held service port was logged %d times, want once naming uid 65534 on 0.0.0.0:9002:\n%s", len(reported), lastLines(log, 40))
		case !inodes[reported[0][1]]:
			t.Errorf("the log names socket inode %s, but the squatter's sockets are %v", reported[0][1], inodes)
		}
		// What the exposure means: the squatter answers the service.
		got, err := tcpFirstLine(l.topo.Client, digestVIP+":9002")
		t.Logf("a client of %s:9002 while it is held: %q, %v", digestVIP, got, err)

		if err := squatter.Stop(); err != nil {
			t.Logf("stopping the squatter: %v", err)
		}
		lab.Eventually(t, "the freed service port served and no longer counted", func() (bool, string) {
			n := metricSum(t, conflicts)
			got, err := tcpFirstLine(l.topo.Client, digestVIP+":9002")
			return n == 0 && err == nil && got != hijackAnswer, fmt.Sprintf("%s %v; a client got %q, %v", conflicts, n, got, err)
		})
		status, body, err = lab.HTTPGetStatus(l.topo.Node, "http://"+nodeIP+":10256/healthz")
		if err != nil || status != 200 || strings.Contains(body, "portalConflicts") {
			t.Errorf("/healthz after the squatter left = %d %q, %v; want 200 without portalConflicts", status, body, err)
		}
		if log := l.kproxy.Log(); !regexp.MustCompile(`free again.*protocol="TCP" address="` + regexp.QuoteMeta(digestVIP) + `:9002"`).MatchString(log) {
			t.Errorf("kproxy did not log that %s:9002 is free again:\n%s", digestVIP, lastLines(log, 20))
		}
	})
}

// socketInodes lists the inodes of the sockets process pid holds.
func socketInodes(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if m := regexp.MustCompile(`^socket:\[(\d+)\]$`).FindStringSubmatch(target); m != nil {
			out[m[1]] = true
		}
	}
	return out
}
