package e2e

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// lateVIP is the UDP service TestUDPRelayWaitsForItsGuardRule adds while
// rule writes fail.
const lateVIP = "198.18.0.77"

// TestUDPRelayWaitsForItsGuardRule: while iptables-restore fails, a UDP
// service added meanwhile gets a relay and a proxy port but no portal and
// no guard rule; a datagram sent straight to that port must not reach an
// endpoint (the relay would otherwise be an open relay until the rules are
// written). Once the writes work again, the port is guarded and the service
// answers. The restore tool is made to fail by a wrapper first on kproxy's
// PATH that refuses while a flag file exists.
func TestUDPRelayWaitsForItsGuardRule(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.relays && !m.localPortals }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		dir, failFlag := failingRestore(t)
		l.runKproxy(t, []string{"PATH=" + dir + ":" + os.Getenv("PATH")}, "--iptables-sync-period=2s")
		before := kproxyUDPPorts(t, l)

		if err := os.WriteFile(failFlag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		late := docs(renderCore(l.backends),
			serviceDoc("late", "clusterIP: "+lateVIP+", ports: [{name: dns, port: 53, protocol: UDP, targetPort: 9000}]", ""),
			sliceDoc("late-1", "late", "{name: dns, port: 9000, protocol: UDP}", remoteEndpoints(l.backends, "")...))
		l.write(t, late)
		var port int
		lab.Eventually(t, "a relay for the late service", func() (bool, string) {
			for _, p := range kproxyUDPPorts(t, l) {
				if !slices.Contains(before, p) {
					port = p
					return true, ""
				}
			}
			return false, fmt.Sprint(before)
		})
		direct := nodeIP + ":" + strconv.Itoa(port)
		for i := range 3 {
			if answer, err := lab.UDPAsk(l.topo.Client, direct, "ping"); err == nil {
				t.Fatalf("datagram %d straight to proxy port %d, whose guard rule could not be written, was answered: %q", i, port, answer)
			}
		}

		if err := os.Remove(failFlag); err != nil {
			t.Fatal(err)
		}
		lab.Eventually(t, "the late service to answer once rules can be written", func() (bool, string) {
			_, err := askUDP(l.topo.Client, lateVIP+":53")()
			return err == nil, fmt.Sprint(err)
		})
		if _, err := lab.UDPAsk(l.topo.Client, direct, "ping"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("a datagram straight to proxy port %d once its guard is in: %v, want it refused", port, err)
		}
	})
}

// kproxyUDPPorts lists the UDP ports kproxy's sockets are bound to.
func kproxyUDPPorts(t *testing.T, l *e2eLab) []int {
	t.Helper()
	out := l.topo.Node.MustExec("ss", "-Hlunp")
	pid := "pid=" + strconv.Itoa(l.kproxy.Pid()) + ","
	var ports []int
	for _, m := range regexp.MustCompile(`(?m)^\S+\s+\S+\s+\S+\s+\S*:(\d+)\s.*$`).FindAllStringSubmatch(out, -1) {
		if regexp.MustCompile(regexp.QuoteMeta(pid)).MatchString(m[0]) {
			ports = append(ports, mustAtoi(t, m[1]))
		}
	}
	return ports
}
