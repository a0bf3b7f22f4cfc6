// Package demo is `make demo`: it builds the network-namespace lab, runs the
// real kproxy binary in userspace mode on deploy/samples/lab.yaml, sends
// traffic from the client host and reports what happened. It is also an
// end-to-end test, so it asserts what it shows.
package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// reportEnv names a file the demo writes its human-readable report to; the
// Makefile prints it.
const reportEnv = "KPROXY_DEMO_REPORT"

type report struct{ strings.Builder }

func (r *report) line(format string, args ...any) { fmt.Fprintf(&r.Builder, format+"\n", args...) }

func TestDemo(t *testing.T) {
	bin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
		return
	}
	manifest, err := filepath.Abs("../../deploy/samples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 3})
	lab.StartServers(t, topo, lab.ServerOptions{NoIperf: true})
	kp := topo.Node.Start(bin, "--proxy-mode=userspace", "--services-file="+manifest, "--hostname-override=node")
	lab.WaitSynced(t, kp, 1)

	var r report
	r.line("kproxy --proxy-mode=userspace --services-file=deploy/samples/lab.yaml, on the lab's node (198.19.0.1);")
	r.line("the client host (198.19.0.2) talks to Service VIPs; backends 198.19.1.11-13 answer with their names.")
	r.line("")

	r.line("Portal rules kproxy programmed (iptables -t nat -S KUBE-PORTALS-CONTAINER):")
	for _, rule := range strings.Split(strings.TrimSpace(topo.Node.MustExec("iptables", "-t", "nat", "-S", "KUBE-PORTALS-CONTAINER")), "\n") {
		r.line("  %s", rule)
	}
	r.line("")

	web := count(t, 9, func() (string, error) { return lab.HTTPGet(topo.Client, "http://198.18.0.10/") })
	r.line("9 HTTP requests to demo/web (198.18.0.10:80), new connection each: %s", web)
	if len(web) != 3 {
		t.Errorf("round-robin reached %d backends, want 3: %s", len(web), web)
	}
	nodePort := count(t, 6, func() (string, error) { return lab.HTTPGet(topo.Client, "http://198.19.0.1:30080/") })
	r.line("6 HTTP requests to the NodePort 198.19.0.1:30080:                 %s", nodePort)
	sticky := count(t, 9, func() (string, error) { return lab.HTTPGet(topo.Client, "http://198.18.0.20/") })
	r.line("9 HTTP requests to demo/sticky (ClientIP affinity):               %s", sticky)
	if len(sticky) != 1 {
		t.Errorf("affinity did not hold: %s", sticky)
	}
	echo := count(t, 9, func() (string, error) { return backendName(topo.Client, "198.18.0.53:53") })
	r.line("9 UDP datagrams to demo/echo (198.18.0.53:53), new socket each:   %s", echo)
	if len(echo) != 3 {
		t.Errorf("UDP round-robin reached %d backends, want 3: %s", len(echo), echo)
	}
	r.line("")
	r.line("kproxy's data-plane metrics (127.0.0.1:10249/metrics on the node):")
	for _, m := range metrics(t, "kproxy_userspace_connections_total", "kproxy_userspace_udp_flows_total",
		"kproxy_userspace_bytes_total", "kubeproxy_sync_proxy_rules_duration_seconds_count") {
		if !strings.HasSuffix(m, " 0") {
			r.line("  %s", m)
		}
	}

	t.Log("\n" + r.String())
	if path := os.Getenv(reportEnv); path != "" {
		if err := os.WriteFile(path, []byte(r.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tally counts answers per backend and prints them in name order.
type tally map[string]int

func (c tally) String() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s×%d", n, c[n])
	}
	return strings.Join(parts, "  ")
}

// count asks n times and tallies the answers.
func count(t *testing.T, n int, ask func() (string, error)) tally {
	t.Helper()
	return tally(lab.Spread(t, n, ask))
}

// backendName asks the UDP echo at addr from h and returns the name of the
// backend that answered (the first word of the reply).
func backendName(h *lab.Host, addr string) (string, error) {
	reply, err := lab.UDPAsk(h, addr, "hello")
	if err != nil {
		return "", err
	}
	name, _, _ := strings.Cut(reply, " ")
	return name, nil
}

// metrics returns the samples of the named metric families.
func metrics(t *testing.T, names ...string) []string {
	t.Helper()
	samples, err := lab.MetricSamples(names...)
	if err != nil {
		t.Fatal(err)
	}
	return samples
}
