package e2e

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// The fault-injection run: traffic flows through the proxy while
// faults hit it one after another, and every request is counted. A request
// may fail only while a fault lasts (from its start until the proxy has
// recovered, plus faultGrace); the run prints the figures.

const (
	// faultSyncPeriod is the --iptables-sync-period of the run: a flushed
	// firewall is repaired within one.
	faultSyncPeriod = 2 * time.Second
	// faultGrace is how long after a fault ends a request started during
	// it may still fail (a retransmitted SYN waits up to a second).
	faultGrace = 1500 * time.Millisecond
	// inPlaceRewrites is how many times the services file is rewritten
	// in place (truncated, then written) as a non-atomic editor saves it.
	inPlaceRewrites = 100
	// editorStall is how long every tenth rewrite leaves the file empty.
	editorStall = 300 * time.Millisecond
)

// outcome is one request's result.
type outcome struct {
	kind       string // "tcp" or "udp"
	start, end time.Time
	err        error
}

// faultWindow is when one fault lasted. Requests may fail during a
// tolerated one (and for faultGrace after it), never during the others.
type faultWindow struct {
	name       string
	start, end time.Time
	tolerated  bool
}

// trafficRecorder runs requests in a loop until stopped.
type trafficRecorder struct {
	mu       sync.Mutex
	outcomes []outcome
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startTraffic(l *e2eLab) *trafficRecorder {
	r := &trafficRecorder{stop: make(chan struct{})}
	probes := map[string]func() (string, error){
		"tcp": askHTTP(l.topo.Client, "http://"+webVIP+"/"),
		"udp": askUDP(l.topo.Client, echoVIP+":53"),
	}
	for kind, ask := range probes {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				select {
				case <-r.stop:
					return
				default:
				}
				start := time.Now()
				_, err := ask()
				r.mu.Lock()
				r.outcomes = append(r.outcomes, outcome{kind: kind, start: start, end: time.Now(), err: err})
				r.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return r
}

func (r *trafficRecorder) finish() []outcome {
	close(r.stop)
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes
}

func TestFaultInjection(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		// Registered first, so it runs last: a failure's figures come
		// after the processes' logs, at the end of the output, where a
		// truncated CI log still shows them.
		var progress strings.Builder
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the faults, again after the logs:\n%s", progress.String())
			}
		})
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		args := append(kproxyArgs(m, "--services-file="+l.manifest), "--iptables-sync-period="+faultSyncPeriod.String())
		l.startKproxy(t, nil, args)
		traffic := startTraffic(l)
		var windows []faultWindow
		fault := func(name string, tolerated bool, inject func()) {
			t.Helper()
			w := faultWindow{name: name, start: time.Now(), tolerated: tolerated}
			fmt.Fprintf(&progress, "%s: %s started\n", w.start.Format("15:04:05.000"), name)
			inject()
			w.end = time.Now()
			fmt.Fprintf(&progress, "%s: %s ended\n", w.end.Format("15:04:05.000"), name)
			windows = append(windows, w)
			time.Sleep(faultSyncPeriod) // steady traffic between faults
		}
		waitServing := func() {
			t.Helper()
			lab.Eventually(t, "the services to answer again", func() (bool, string) {
				_, errTCP := askHTTP(l.topo.Client, "http://"+webVIP+"/")()
				_, errUDP := askUDP(l.topo.Client, echoVIP+":53")()
				return errTCP == nil && errUDP == nil, fmt.Sprint(errTCP, errUDP)
			})
		}
		time.Sleep(faultSyncPeriod)

		// Until the proxy has put its rules back, or restarted, requests
		// may fail; a rewritten file and a flood must not cost any.
		fault("firewall flushed", true, func() {
			reloadFirewall(t, l, emptyFirewall)
			if m.nftablesRules {
				l.topo.Node.MustExec("nft", "delete", "table", "ip", nftTable)
			}
			waitServing()
		})
		fault("services file rewritten in place", false, func() {
			content := renderCore(l.backends)
			for i := range inPlaceRewrites {
				f, err := os.OpenFile(l.manifest, os.O_WRONLY|os.O_TRUNC, 0)
				if err != nil {
					t.Fatal(err)
				}
				// The editor between truncating and writing; now and then
				// it stalls for longer than kproxy's file-watch debounce.
				pause := 5 * time.Millisecond
				if i%10 == 0 {
					pause = editorStall
				}
				time.Sleep(pause)
				_, err = f.WriteString(content)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		fault("kproxy killed and restarted", true, func() {
			if err := l.kproxy.Kill(); err != nil {
				t.Fatalf("killing kproxy: %v", err)
			}
			l.startKproxy(t, nil, args)
			waitServing()
		})
		fault("UDP flood from one client", false, func() {
			err := l.topo.Client.InNetns(func() error {
				for i := range hostileSourcePorts {
					c, err := net.Dial("udp4", echoVIP+":53")
					if err != nil {
						return fmt.Errorf("flood socket %d: %w", i, err)
					}
					defer c.Close()
					_, _ = c.Write([]byte("flood"))
					if i%100 == 99 {
						time.Sleep(20 * time.Millisecond)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
		outcomes := traffic.finish()
		progress.WriteString(report(t, m, outcomes, windows))
		l.alive(t)
	})
}

// report prints, per fault, the requests sent and failed during it, and
// fails t for any request failed outside a tolerated fault; it returns what
// it printed and why it failed.
func report(t *testing.T, m proxyMode, outcomes []outcome, windows []faultWindow) string {
	t.Helper()
	sort.Slice(outcomes, func(i, j int) bool { return outcomes[i].start.Before(outcomes[j].start) })
	type tally struct{ sent, failed int }
	in := make([]tally, len(windows))
	var outside tally
	var untolerated []string
	for _, o := range outcomes {
		w, tolerated := -1, false
		for i, win := range windows {
			end := win.end
			if win.tolerated {
				end = end.Add(faultGrace)
			}
			// A request counts in a fault it overlaps: one in flight
			// when the fault starts may fail with it.
			if o.end.After(win.start) && o.start.Before(end) && (w < 0 || win.tolerated) {
				w, tolerated = i, win.tolerated
			}
		}
		count := &outside
		if w >= 0 {
			count = &in[w]
		}
		count.sent++
		if o.err == nil {
			continue
		}
		count.failed++
		if !tolerated && len(untolerated) < 10 {
			untolerated = append(untolerated, fmt.Sprintf("%s at %s: %v", o.kind, o.start.Format("15:04:05.000"), o.err))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fault injection, %s mode:\n", m.name)
	for i, w := range windows {
		fmt.Fprintf(&b, "  %-34s lasted %-8v requests %4d, failed %d\n", w.name, w.end.Sub(w.start).Round(10*time.Millisecond), in[i].sent, in[i].failed)
	}
	fmt.Fprintf(&b, "  %-34s                 requests %4d, failed %d", "between the faults", outside.sent, outside.failed)
	if len(untolerated) > 0 {
		fmt.Fprintf(&b, "\nrequests failed outside the faults that may cost some (first %d):\n%s", len(untolerated), strings.Join(untolerated, "\n"))
		t.Error(b.String())
	} else {
		t.Log(b.String())
	}
	return b.String()
}
