package e2e

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Faults of the userspace mode's UDP relays: a hostile client
// cycling through source ports must not take the descriptors the rest of
// kproxy needs.

const (
	// hostileNoFile is the open-file limit kproxy runs under, and
	// hostileSourcePorts how many source ports the hostile client uses:
	// more flows than kproxy may open descriptors.
	hostileNoFile      = 2000
	hostileSourcePorts = 2500
	// hostileClientShare is kproxy's bound on one client address's UDP
	// flows under hostileNoFile (lb/fdbudget: half of the limit for flows,
	// a quarter of that per client).
	hostileClientShare = hostileNoFile / 2 / 4
)

func TestHostileUDPClientCannotExhaustDescriptors(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.relays }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		// Flows live for a minute, so the hostile client's are all held at
		// once, as a slow flood would hold them.
		args := append(kproxyArgs(m, "--services-file="+l.manifest), "--udp-timeout=60s")
		l.startKproxy(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", hostileNoFile, hostileNoFile), "--"}, args)

		created, evicted, active := "kproxy_userspace_udp_flows_total", "kproxy_userspace_udp_flow_evictions_total", "kproxy_userspace_udp_flows_active"
		created0, evicted0 := metricSum(t, created), metricSum(t, evicted)
		opened := 0
		err := l.topo.Client.InNetns(func() error {
			for range hostileSourcePorts {
				c, err := net.Dial("udp4", echoVIP+":53")
				if err != nil {
					return fmt.Errorf("hostile client socket %d: %w", opened, err)
				}
				t.Cleanup(func() { c.Close() })
				if _, err := c.Write([]byte("flood")); err != nil {
					return fmt.Errorf("hostile datagram %d: %w", opened, err)
				}
				opened++
				if opened%100 == 0 {
					// Paced, so the proxy socket's receive buffer does not
					// drop what this test must count.
					time.Sleep(20 * time.Millisecond)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Beyond its share each new flow of the client takes the place of
		// its own least recently active one: it never holds more. (On a
		// busy machine the proxy socket's receive buffer may drop some of
		// the flood, as the kernel drops any UDP: flows are counted as
		// kproxy made them.)
		lab.Eventually(t, "kproxy to hold the hostile client to its share of flows", func() (bool, string) {
			made, gone, flows := metricSum(t, created)-created0, metricSum(t, evicted)-evicted0, metricSum(t, active)
			return flows == hostileClientShare && gone == made-hostileClientShare && made >= hostileSourcePorts/2,
				fmt.Sprintf("%v flows made, %v evicted, %v active (want %d active, the rest evicted, of at least %d made)",
					made, gone, flows, hostileClientShare, hostileSourcePorts/2)
		})
		if n := metricSum(t, `kproxy_userspace_rejected_total{protocol="udp",reason="fd_exhausted"}`); n != 0 {
			t.Errorf("%v of the client's datagrams refused for descriptors, want its oldest flows given up instead", n)
		}
		// The client's newest flow is served: a busy resolver sending each
		// query from a fresh port keeps getting answers.
		if _, err := askUDP(l.topo.Client, echoVIP+":53")(); err != nil {
			t.Errorf("a new flow from the client at its share: %v", err)
		}

		// Everything else still works while the hostile flows are held.
		l.alive(t)
		if status, body, err := lab.HTTPGetStatus(l.topo.Client, "http://"+nodeIP+":10256/healthz"); err != nil || status != 200 {
			t.Errorf("healthz during the flood: status %d, %v (%q)", status, err, body)
		}
		if _, err := lab.MetricSamples("kproxy_userspace_udp_flows_active"); err != nil {
			t.Errorf("metrics during the flood: %v", err)
		}
		for i := range 5 {
			if _, err := askHTTP(l.topo.Client, "http://"+webVIP+"/")(); err != nil {
				t.Errorf("TCP ClusterIP request %d during the flood: %v", i, err)
			}
		}
		// Another client address still gets UDP flows.
		if _, err := askUDP(l.topo.Node, echoVIP+":53")(); err != nil {
			t.Errorf("UDP from another client during the flood: %v", err)
		}
		// And kproxy still syncs.
		syncs := lab.SyncCount(t)
		l.write(t, renderCore(l.backends[:2]))
		lab.WaitSynced(t, l.kproxy, syncs+1)
		if log := l.kproxy.Log(); strings.Contains(log, "too many open files") {
			t.Errorf("kproxy ran out of descriptors:\n%s", lastLines(log, 20))
		}
	})
}

// metricSum adds up every sample of kproxy's metric family or labelled
// series name (0 when there is none).
func metricSum(t *testing.T, name string) float64 {
	t.Helper()
	family, _, _ := strings.Cut(name, "{")
	samples, err := lab.MetricSamples(family)
	if err != nil {
		t.Fatalf("reading kproxy's metrics: %v", err)
	}
	var sum float64
	for _, s := range samples {
		series, value, ok := strings.Cut(s, " ")
		if !ok || (series != name && family != name) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric sample %q: %v", s, err)
		}
		sum += v
	}
	return sum
}

// lastLines returns the last n lines of text.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// idleUDPPorts is how many UDP service ports TestIdleUDPServicePortsMemory
// configures, and idleUDPHeapTarget the memory they may take.
const (
	idleUDPPorts      = 1000
	idleUDPHeapTarget = 20 << 20
)

// TestIdleUDPServicePortsMemory measures what 1,000 idle UDP service ports
// cost kproxy against one port in the same run: its live heap after a
// collection (each relay used to allocate 2 MiB of buffers up front: 200
// ports took 431 MB) and its resident memory. The heap growth must stay
// within the target; both figures are logged for the benchmark table.
func TestIdleUDPServicePortsMemory(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.relays }, func(t *testing.T, m proxyMode) {
		render := func(n int) func(backends []string) string {
			return func(backends []string) string {
				parts := []string{nodeDoc}
				for i := range n {
					name := fmt.Sprintf("udp-%d", i)
					vip := fmt.Sprintf("198.18.%d.%d", 100+i/250, 1+i%250)
					parts = append(parts,
						serviceDoc(name, "clusterIP: "+vip+", ports: [{name: dns, port: 53, protocol: UDP, targetPort: 9000}]", ""),
						sliceDoc(name+"-1", name, "{name: dns, port: 9000, protocol: UDP}", remoteEndpoints(backends[:1], "")...))
				}
				return docs(parts...)
			}
		}
		// --profiling serves /debug/pprof/heap, whose gc=1 collects first:
		// the live heap, not the garbage of the last sync.
		l := startLab(t, m, render(1), "--profiling")
		if l == nil {
			return
		}
		oneHeap, oneRSS := l.memoryAfterGC(t)
		syncs := lab.SyncCount(t)
		l.write(t, render(idleUDPPorts)(l.backends))
		lab.WaitSynced(t, l.kproxy, syncs+1)
		lab.Eventually(t, fmt.Sprintf("the last of %d UDP services to answer", idleUDPPorts), func() (bool, string) {
			_, err := askUDP(l.topo.Client, "198.18.103.250:53")()
			return err == nil, fmt.Sprint(err)
		})
		manyHeap, manyRSS := l.memoryAfterGC(t)
		mib := func(b float64) float64 { return b / (1 << 20) }
		t.Logf("kproxy with 1 → %d idle UDP service ports (%s): live heap %.1f → %.1f MiB (%.1f KiB per port), RSS %.1f → %.1f MiB",
			idleUDPPorts, m.name, mib(oneHeap), mib(manyHeap), (manyHeap-oneHeap)/1024/idleUDPPorts, mib(oneRSS), mib(manyRSS))
		if grew := manyHeap - oneHeap; grew > idleUDPHeapTarget {
			t.Errorf("%d idle UDP service ports take %.1f MiB of live heap, want at most %d MiB", idleUDPPorts, mib(grew), idleUDPHeapTarget>>20)
		}
	})
}

// memoryAfterGC makes kproxy collect garbage (through pprof's gc=1) and
// returns its live heap and resident memory, in bytes.
func (l *e2eLab) memoryAfterGC(t *testing.T) (heap, rss float64) {
	t.Helper()
	status, body, err := lab.HTTPGetStatus(l.topo.Node, "http://127.0.0.1:10249/debug/pprof/heap?gc=1&debug=1")
	if err != nil || status != 200 {
		t.Fatalf("asking kproxy to collect garbage: status %d, %v (%.200q)", status, err, body)
	}
	heap = metricSum(t, "go_memstats_heap_alloc_bytes")
	proc, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", l.kproxy.Pid()))
	if err != nil {
		t.Fatalf("reading kproxy's memory use: %v", err)
	}
	for _, line := range strings.Split(string(proc), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				t.Fatalf("kproxy's VmRSS %q: %v", v, err)
			}
			return heap, kib * 1024
		}
	}
	t.Fatalf("no VmRSS in kproxy's /proc status")
	return 0, 0
}
