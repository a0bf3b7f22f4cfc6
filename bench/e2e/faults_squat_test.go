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

// renderDigest is a services file with the digest service alone (TCP
// 9002, an unprivileged port a local user may bind); without it, none.
func renderDigest(backends []string, withDigest bool) string {
	if !withDigest {
		return nodeDoc
	}
	return docs(nodeDoc,
		serviceDoc("digest", "clusterIP: "+digestVIP+", ports: [{name: digest, port: 9002}]", ""),
		sliceDoc("digest-1", "digest", "{name: digest, port: 9002, protocol: TCP}", remoteEndpoints(backends, "")...))
}

// TestSquattedServicePortIsReported: with local portals each service port
// is an ordinary socket on the service address, so a local user who binds
// the port first holds it and receives the service's traffic there:
// on the wildcard address before kproxy starts, or on the service address
// itself (IP_FREEBIND) between the service's removal and its re-add.
// kproxy cannot prevent that with these portals; it must say so: the
// start-up log names the exposure, the log names the holder (address, uid,
// socket inode) once, the conflict is counted in
// kproxy_userspace_portal_conflicts and listed in /healthz (still 200).
// Once the squatter closes, the next sync serves the port and the count
// drops to 0.
func TestSquattedServicePortIsReported(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.localPortals && !m.steered }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, func(backends []string) string { return renderDigest(backends, true) })
		if l == nil {
			return
		}
		service := digestVIP + ":9002"
		conflicts := `kproxy_userspace_portal_conflicts{protocol="TCP"}`
		// heldBy waits for kproxy to report squatter, bound to bound, as
		// holding the service port: once in the log, in the metric and on
		// /healthz.
		heldBy := func(squatter *lab.Process, bound string) {
			t.Helper()
			inodes := socketInodes(t, squatter.Pid())
			lab.Eventually(t, "the held service port counted", func() (bool, string) {
				n := metricSum(t, conflicts)
				return n == 1, fmt.Sprintf("%s %v", conflicts, n)
			})
			status, body, err := lab.HTTPGetStatus(l.topo.Node, "http://"+nodeIP+":10256/healthz")
			held := "TCP " + service + " of default/digest:digest/TCP held by uid 65534 (socket inode "
			if err != nil || status != 200 || !strings.Contains(body, `"portalConflicts":1`) || !strings.Contains(body, held) {
				t.Errorf("/healthz = %d %q, %v; want 200 with portalConflicts 1 naming %q", status, body, err, held)
			}
			log := l.kproxy.Log()
			reported := regexp.MustCompile(`NOT served by kproxy.*address="`+regexp.QuoteMeta(service)+
				`".*uid 65534 \(socket inode (\d+) bound to `+regexp.QuoteMeta(bound)+`\)`).FindAllStringSubmatch(log, -1)
			switch {
			case len(reported) != 1:
				t.Errorf("the held service port was logged %d times, want once naming uid 65534 on %s:\n%s", len(reported), bound, lastLines(log, 40))
			case !inodes[reported[0][1]]:
				t.Errorf("the log names socket inode %s, but the squatter's sockets are %v", reported[0][1], inodes)
			}
			// What the exposure means: the squatter answers the service.
			got, err := tcpFirstLine(l.topo.Client, service)
			t.Logf("a client of %s while %s holds it: %q, %v", service, bound, got, err)
		}
		// freed stops squatter and waits for kproxy to serve the port.
		freed := func(squatter *lab.Process, times int) {
			t.Helper()
			if err := squatter.Stop(); err != nil {
				t.Logf("stopping the squatter: %v", err)
			}
			lab.Eventually(t, "the freed service port served and no longer counted", func() (bool, string) {
				n := metricSum(t, conflicts)
				got, err := tcpFirstLine(l.topo.Client, service)
				return n == 0 && err == nil && got != hijackAnswer, fmt.Sprintf("%s %v; a client got %q, %v", conflicts, n, got, err)
			})
			status, body, err := lab.HTTPGetStatus(l.topo.Node, "http://"+nodeIP+":10256/healthz")
			if err != nil || status != 200 || strings.Contains(body, "portalConflicts") {
				t.Errorf("/healthz after the squatter left = %d %q, %v; want 200 without portalConflicts", status, body, err)
			}
			log := l.kproxy.Log()
			if n := len(regexp.MustCompile(`free again.*protocol="TCP" address="`+regexp.QuoteMeta(service)+`"`).FindAllString(log, -1)); n != times {
				t.Errorf("kproxy logged %s free again %d times, want %d:\n%s", service, n, times, lastLines(log, 20))
			}
		}

		// Before kproxy starts, on every address.
		squatter := l.startHijacker(t, "", 9002)
		defer squatter.Stop()
		// A short sync period: the retry that finds the port free comes
		// from the periodic sync.
		l.runKproxy(t, nil, "--iptables-sync-period=2s")
		if log := l.kproxy.Log(); !strings.Contains(log, "Any local user can bind a service address") {
			t.Errorf("the start-up log does not name the local portals' exposure:\n%s", lastLines(log, 40))
		}
		heldBy(squatter, "0.0.0.0:9002")
		freed(squatter, 1)

		// Between the service's removal and its re-add, on the service
		// address itself.
		l.write(t, renderDigest(l.backends, false))
		lab.Eventually(t, "the removed service refused", func() (bool, string) {
			_, err := tcpFirstLine(l.topo.Client, service)
			return err != nil, fmt.Sprint(err)
		})
		squatter = l.startHijacker(t, digestVIP, 9002)
		defer squatter.Stop()
		l.write(t, renderDigest(l.backends, true))
		heldBy(squatter, service)
		freed(squatter, 2)
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
