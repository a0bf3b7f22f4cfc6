package e2e

import (
	"fmt"
	"net"
	"os"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// TestHealthzHeldOpenByAHost: a remote host opening hundreds of idle
// connections to the healthz port (on every address by default) may hold
// only its share of them; other probers are still answered and kproxy's
// descriptors stay bounded.
func TestHealthzHeldOpenByAHost(t *testing.T) {
	const held = 500
	forModes(t, func(m proxyMode) bool { return m.iptablesRules }, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		before := openDescriptors(t, l.kproxy.Pid())
		err := l.topo.Client.InNetns(func() error {
			for i := range held {
				c, err := net.Dial("tcp4", nodeIP+":10256")
				if err != nil {
					return fmt.Errorf("connection %d: %w", i, err)
				}
				t.Cleanup(func() { c.Close() })
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Another prober (the node itself, as the kubelet would be) is
		// answered while the connections are held.
		if status, body, err := lab.HTTPGetStatus(l.topo.Node, "http://"+nodeIP+":10256/healthz"); err != nil || status != 200 {
			t.Errorf("healthz from the node while %d connections are held: %d, %v (%q)", held, status, err, body)
		}
		after := openDescriptors(t, l.kproxy.Pid())
		t.Logf("kproxy's descriptors: %d before, %d with %d idle connections held by one host", before, after, held)
		if after-before > 32 {
			t.Errorf("kproxy holds %d more descriptors with %d idle connections from one host, want at most its share (16) and a few", after-before, held)
		}
	})
}

// openDescriptors counts the descriptors process pid holds.
func openDescriptors(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("listing kproxy's descriptors: %v", err)
	}
	return len(entries)
}
