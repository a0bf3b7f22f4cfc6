package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Services whose endpoints lead back into kproxy: a relay that dialled them
// would accept its own connection and dial again, until the process had no
// descriptor left and every service, /healthz and /metrics were dead.

const (
	// loopNoFile is the open-file limit kproxy runs under here, so that
	// kproxy without loop protection runs out quickly rather than holding
	// the machine's descriptors.
	loopNoFile = 4096
	// loopVIP's service has itself as its endpoint; loopAVIP's has
	// loopBVIP's service as its endpoint, and that one loopAVIP's.
	loopVIP      = "198.18.200.95"
	loopNodeVIP  = "198.18.200.96"
	loopAVIP     = "198.18.200.97"
	loopBVIP     = "198.18.200.98"
	loopUDPVIP   = "198.18.200.99"
	loopNodePort = 30090
	// loopDeadline is how long a looping request may take to fail: far
	// more than it takes (printed), so that a busy machine does not fail
	// the case.
	loopDeadline = 10 * time.Second
	// loopRequests is how often each loop is asked.
	loopRequests = 3
	// loopDescriptorSlack bounds the descriptors kproxy may hold above its
	// level before while the loops are asked (each request holds a
	// handful, briefly); without protection it runs up to loopNoFile.
	loopDescriptorSlack = 256
)

// renderLoops is the core services file plus the looping services.
func renderLoops(backends []string) string {
	loopSlice := func(name, svc, ip string, port int) string {
		return sliceDoc(name, svc, fmt.Sprintf("{name: http, port: %d, protocol: TCP}", port), endpoint(ip, "other", ""))
	}
	return docs(renderCore(backends),
		serviceDoc("loop", "clusterIP: "+loopVIP+", ports: [{name: http, port: 80}]", ""),
		loopSlice("loop-1", "loop", loopVIP, 80),
		serviceDoc("nploop", fmt.Sprintf("type: NodePort, clusterIP: %s, ports: [{name: http, port: 80, nodePort: %d}]", loopNodeVIP, loopNodePort), ""),
		loopSlice("nploop-1", "nploop", nodeIP, loopNodePort),
		serviceDoc("loopa", "clusterIP: "+loopAVIP+", ports: [{name: http, port: 80}]", ""),
		loopSlice("loopa-1", "loopa", loopBVIP, 80),
		serviceDoc("loopb", "clusterIP: "+loopBVIP+", ports: [{name: http, port: 80}]", ""),
		loopSlice("loopb-1", "loopb", loopAVIP, 80),
		serviceDoc("loopudp", "clusterIP: "+loopUDPVIP+", ports: [{name: dns, port: 53, protocol: UDP}]", ""),
		sliceDoc("loopudp-1", "loopudp", "{name: dns, port: 53, protocol: UDP}", endpoint(loopUDPVIP, "other", "")),
	)
}

// TestServiceLoopsAreRefused: a request to a service whose endpoint is its
// own cluster IP, to a NodePort whose endpoint is that NodePort on the node,
// or to one of two services that are each other's endpoint, fails at once
// in every userspace portal kind; another service answers throughout,
// /healthz stays 200, kproxy's descriptors stay near their level and come
// back to it, and the refusals are counted and logged once per service port.
func TestServiceLoopsAreRefused(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.relays }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderLoops)
		if l == nil {
			return
		}
		l.startKproxy(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", loopNoFile, loopNoFile), "--"},
			kproxyArgs(m, "--services-file="+l.manifest))
		lab.Eventually(t, "the cluster IP answering", func() (bool, string) {
			answer, err := askHTTP(l.topo.Client, "http://"+webVIP+"/")()
			return err == nil && l.isBackend(answer), answer
		})
		pid := l.kproxy.Pid()
		before := openDescriptors(t, pid)

		watch := startLoopWatch(t, l, pid)
		loops := []struct{ name, addr string }{
			{"a service whose endpoint is its own cluster IP", loopVIP + ":80"},
			{"a NodePort whose endpoint is that NodePort on the node", fmt.Sprintf("%s:%d", nodeIP, loopNodePort)},
			{"two services that are each other's endpoint", loopAVIP + ":80"},
		}
		for _, lp := range loops {
			wantLoopRefused(t, lp.name, lp.addr, func() (string, error) {
				_, answer, err := askOnce(l.topo.Client, lp.addr)
				return answer, err
			})
		}
		// A UDP service that is its own endpoint: its datagrams come back
		// from kproxy's own flow and are dropped, not relayed again.
		if err := l.topo.Client.InNetns(func() error {
			c, err := net.Dial("udp4", loopUDPVIP+":53")
			if err != nil {
				return err
			}
			defer c.Close()
			for range loopRequests {
				if _, err := c.Write([]byte("round and round")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("sending to the UDP loop: %v", err)
		}
		lab.Eventually(t, "the UDP loop's datagrams dropped as loops", func() (bool, string) {
			n := metricSum(t, `kproxy_userspace_rejected_total{protocol="udp",reason="loop"}`)
			return n >= loopRequests, fmt.Sprintf("%v dropped as loops", n)
		})
		// The other service keeps answering a little longer, so a
		// breakdown the loops left behind would show.
		time.Sleep(time.Second)
		stats := watch.stop()
		t.Logf("meanwhile: %d requests to another service, %d failed; %d /healthz probes, %d not 200; kproxy's descriptors %d before, peak %d",
			stats.asked, stats.failed, stats.probes, stats.probeFailures, before, stats.peak)
		if stats.failed > 0 {
			t.Errorf("%d of %d requests to another service failed while the loops were asked; first error: %v", stats.failed, stats.asked, stats.firstErr)
		}
		if stats.probeFailures > 0 {
			t.Errorf("%d of %d /healthz probes were not answered 200 while the loops were asked; first: %v", stats.probeFailures, stats.probes, stats.firstProbeErr)
		}
		if stats.peak > before+loopDescriptorSlack {
			t.Errorf("kproxy's descriptors peaked at %d, %d before: the loops amplified", stats.peak, before)
		}
		var final int
		lab.Eventually(t, "kproxy's descriptors back at their level before", func() (bool, string) {
			final = openDescriptors(t, pid)
			return final <= before, fmt.Sprintf("%d descriptors, %d before", final, before)
		})
		t.Logf("kproxy's descriptors: %d before, %d after", before, final)

		if refused := metricSum(t, `kproxy_userspace_rejected_total{protocol="tcp",reason="loop"}`); refused < float64(len(loops)*loopRequests) {
			t.Errorf("kproxy_userspace_rejected_total{reason=loop} = %v, want at least %d", refused, len(loops)*loopRequests)
		}
		checkLoggedOncePerServicePort(t, l.kproxy.Log(), "from kproxy itself", len(loops)+1)
	})
}

// askOnce sends an HTTP request on a new connection to addr from h and
// reads the answer, giving up after loopDeadline; an error means no answer.
func askOnce(h *lab.Host, addr string) (took time.Duration, answer string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), loopDeadline+5*time.Second)
	defer cancel()
	start := time.Now()
	conn, err := h.DialContext(ctx, "tcp4", addr)
	if err != nil {
		return time.Since(start), "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(loopDeadline + 5*time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: loop\r\n\r\n"); err != nil {
		return time.Since(start), "", err
	}
	data, err := io.ReadAll(conn)
	took = time.Since(start)
	if err == nil && !strings.HasPrefix(string(data), "HTTP/") {
		err = fmt.Errorf("connection closed with %q, no HTTP answer", data)
	}
	return took, strings.TrimSpace(string(data)), err
}

// loopWatch asks another service and /healthz over and over and samples
// kproxy's descriptors, until stopped.
type loopWatch struct {
	stopped  chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
	peak     atomic.Int64

	mu    sync.Mutex
	stats loopStats
}

type loopStats struct {
	asked, failed         int
	probes, probeFailures int
	peak                  int
	firstErr              error
	firstProbeErr         error
}

func startLoopWatch(t *testing.T, l *e2eLab, pid int) *loopWatch {
	w := &loopWatch{stopped: make(chan struct{})}
	w.peak.Store(int64(openDescriptors(t, pid)))
	repeat := func(f func()) {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			for {
				select {
				case <-w.stopped:
					return
				default:
				}
				f()
			}
		}()
	}
	repeat(func() {
		answer, err := askHTTP(l.topo.Client, "http://"+webVIP+"/")()
		if err == nil && !l.isBackend(answer) {
			err = fmt.Errorf("answered %q", answer)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.stats.asked++
		if err != nil {
			w.stats.failed++
			if w.stats.firstErr == nil {
				w.stats.firstErr = err
			}
		}
	})
	repeat(func() {
		status, body, err := lab.HTTPGetStatus(l.topo.Node, "http://"+nodeIP+":10256/healthz")
		if err == nil && status != 200 {
			err = fmt.Errorf("status %d: %q", status, body)
		}
		w.mu.Lock()
		w.stats.probes++
		if err != nil {
			w.stats.probeFailures++
			if w.stats.firstProbeErr == nil {
				w.stats.firstProbeErr = err
			}
		}
		w.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	})
	repeat(func() {
		if entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil && int64(len(entries)) > w.peak.Load() {
			w.peak.Store(int64(len(entries)))
		}
		time.Sleep(5 * time.Millisecond)
	})
	t.Cleanup(func() { w.stop() })
	return w
}

// stop ends the watch and returns what it saw.
func (w *loopWatch) stop() loopStats {
	w.stopOnce.Do(func() { close(w.stopped) })
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.peak = int(w.peak.Load())
	return w.stats
}

// checkLoggedOncePerServicePort checks that kproxy's log has a line
// containing marker for at least want service ports, and never two for one.
func checkLoggedOncePerServicePort(t *testing.T, log, marker string, want int) {
	t.Helper()
	logged := map[string]int{}
	servicePort := regexp.MustCompile(`servicePort="([^"]*)"`)
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, marker) {
			continue
		}
		if sp := servicePort.FindStringSubmatch(line); sp != nil {
			logged[sp[1]]++
		}
	}
	t.Logf("loop log lines per service port: %v", logged)
	if len(logged) < want {
		t.Errorf("loops logged for %d service ports, want %d: %v", len(logged), want, logged)
	}
	for sp, n := range logged {
		if n > 1 {
			t.Errorf("the loop of %s was logged %d times, want once", sp, n)
		}
	}
}

// wantLoopRefused asks a looping service loopRequests times through ask and
// checks that every request fails, each within loopDeadline.
func wantLoopRefused(t *testing.T, name, addr string, ask func() (string, error)) {
	t.Helper()
	var slowest time.Duration
	for i := range loopRequests {
		start := time.Now()
		answer, err := ask()
		took := time.Since(start)
		if err == nil {
			t.Errorf("%s (%s), request %d: answered %q, want a refusal", name, addr, i+1, answer)
		}
		if took > loopDeadline {
			t.Errorf("%s (%s), request %d: failed after %v, want within %v", name, addr, i+1, took, loopDeadline)
		}
		slowest = max(slowest, took)
	}
	t.Logf("%s (%s): %d requests refused, the slowest after %v", name, addr, loopRequests, slowest.Round(time.Microsecond))
}
