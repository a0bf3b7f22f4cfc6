package swap

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Traffic: streams of requests, each on a new connection (so each one goes
// through the NAT rules afresh, where a gap in the rules would show), and a
// cloud load balancer's health checker. Every answer is counted against
// the phase it was sent in.

const (
	// requestGap is the pause between two requests of a stream; while a
	// proxy is being replaced (swapGap) the streams go as fast as they can,
	// so that a gap of a few milliseconds in the rules shows.
	requestGap = 10 * time.Millisecond
	swapGap    = time.Millisecond
	// slowRequest is slower than a request on a working path can be here:
	// a dropped SYN is retransmitted after 1 s.
	slowRequest = 900 * time.Millisecond
	// healthInterval, unhealthyAfter and healthyAfter shape the load
	// balancer's health checks (a cloud's are coarser, 2-10 s).
	healthInterval = 250 * time.Millisecond
	unhealthyAfter = 3
	healthyAfter   = 2
	// keptFailures is how many failures of a stream in a phase are kept
	// for the report.
	keptFailures = 5
)

// tally counts one stream's requests in one phase.
type tally struct {
	ok, failed, slow int
	max              time.Duration
	failures         []string
}

// recorder counts requests by phase and stream.
type recorder struct {
	mu      sync.Mutex
	phase   string
	phases  []string
	streams []string
	counts  map[string]map[string]*tally
	events  []string
}

func newRecorder(first string) *recorder {
	r := &recorder{counts: map[string]map[string]*tally{}}
	r.setPhase(first)
	return r
}

func (r *recorder) setPhase(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = name
	if !slices.Contains(r.phases, name) {
		r.phases = append(r.phases, name)
		r.counts[name] = map[string]*tally{}
	}
}

// event notes something that happened (a proxy stopped, the load balancer
// took a node out), with the phase and time.
func (r *recorder) event(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s [%s] %s", time.Now().Format("15:04:05.000"), r.phase, fmt.Sprintf(format, args...)))
}

// current is the phase requests are sent in now.
func (r *recorder) current() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

// add counts one request of stream sent in phase that took took; err says
// why it failed.
func (r *recorder) add(phase, stream string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.streams, stream) {
		r.streams = append(r.streams, stream)
	}
	tl := r.counts[phase][stream]
	if tl == nil {
		tl = &tally{}
		r.counts[phase][stream] = tl
	}
	tl.max = max(tl.max, took)
	if took > slowRequest {
		tl.slow++
	}
	if err != nil {
		tl.failed++
		if len(tl.failures) < keptFailures {
			tl.failures = append(tl.failures, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
		}
		return
	}
	tl.ok++
}

// totals sums the streams whose names match keep, per phase.
func (r *recorder) totals(phase string, keep func(stream string) bool) tally {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum tally
	for stream, tl := range r.counts[phase] {
		if !keep(stream) {
			continue
		}
		sum.ok += tl.ok
		sum.failed += tl.failed
		sum.slow += tl.slow
		sum.max = max(sum.max, tl.max)
		for _, f := range tl.failures {
			sum.failures = append(sum.failures, stream+": "+f)
		}
	}
	return sum
}

// table renders every phase and stream.
func (r *recorder) table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %-28s %8s %7s %5s %9s\n", "phase", "stream", "ok", "failed", "slow", "max")
	for _, phase := range r.phases {
		for _, stream := range r.streams {
			tl := r.counts[phase][stream]
			if tl == nil {
				continue
			}
			fmt.Fprintf(&b, "%-22s %-28s %8d %7d %5d %9v\n", phase, stream, tl.ok, tl.failed, tl.slow, tl.max.Round(time.Millisecond))
			for _, f := range tl.failures {
				fmt.Fprintf(&b, "    %s\n", f)
			}
		}
	}
	return b.String()
}

// isHealthCheck says whether a stream is the load balancer's health checks.
func isHealthCheck(stream string) bool { return strings.HasPrefix(stream, "health check ") }

// isSwap says whether requests are sent while proxies are being replaced.
func isSwap(phase string) bool { return strings.HasPrefix(phase, "swap ") }

// loop runs ask every gap (swapGap during a swap, for the requests) until
// ctx ends, counting each answer.
func loop(ctx context.Context, wg *sync.WaitGroup, r *recorder, stream string, gap time.Duration, ask func() error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			// A request counts in the phase it was sent in, and one still
			// running when the traffic stops is waited for (ask has its
			// own timeout): a request hanging in a gap is not lost.
			phase, start := r.current(), time.Now()
			err := ask()
			r.add(phase, stream, time.Since(start), err)
			wait := gap
			if gap == requestGap && isSwap(r.current()) {
				wait = swapGap
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}()
}

// getExpect fetches url from d and checks the status and that the body
// passes check.
func getExpect(d lab.Dialer, url string, status int, check func(body string) error) error {
	got, body, err := lab.HTTPGetStatus(d, url)
	if err != nil {
		return err
	}
	if got != status {
		return fmt.Errorf("GET %s: status %d, want %d (%q)", url, got, status, body)
	}
	if check != nil {
		return check(body)
	}
	return nil
}

// loadBalancer models a cloud load balancer in front of the Local service:
// it health-checks every node's health-check node port, keeps the nodes
// that pass in its pool and sends the client's requests to them in turn.
type loadBalancer struct {
	mu      sync.Mutex
	healthy []bool
	next    int
}

func (lb *loadBalancer) setHealthy(i int, ok bool) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.healthy[i] = ok
}

// pick returns the next healthy node, or -1.
func (lb *loadBalancer) pick() int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for range lb.healthy {
		i := lb.next % len(lb.healthy)
		lb.next++
		if lb.healthy[i] {
			return i
		}
	}
	return -1
}

func (lb *loadBalancer) pool() []int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var in []int
	for i, ok := range lb.healthy {
		if ok {
			in = append(in, i)
		}
	}
	return in
}

// startTraffic starts every stream and returns how to stop them (which
// waits for them).
func startTraffic(c *lab.Cluster, r *recorder, lb *loadBalancer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	isWeb := func(body string) error {
		if p := strings.TrimSpace(body); !strings.HasPrefix(p, "web-") {
			return fmt.Errorf("answer %q is not a web pod's", body)
		}
		return nil
	}
	for i, n := range c.Nodes {
		from := n.Pod("client")
		loop(ctx, &wg, r, "ClusterIP from "+from.Name, requestGap, func() error {
			return getExpect(from, fmt.Sprintf("http://%s:%d/", webVIP, servicePort), 200, isWeb)
		})
		loop(ctx, &wg, r, "NodePort via "+n.Name, requestGap, func() error {
			return getExpect(c.Client, fmt.Sprintf("http://%s:%d/", n.IPv4, webNodePort), 200, isWeb)
		})
		// The health checker: consecutive results move the node in or out
		// of the pool.
		var fails, oks int
		want := 503
		if hasLocal(c, i) {
			want = 200
		}
		loop(ctx, &wg, r, "health check "+n.Name, healthInterval, func() error {
			status, _, err := lab.HTTPGetStatus(c.LB, fmt.Sprintf("http://%s:%d/", n.IPv4, localHCPort))
			if err == nil && status == 200 {
				fails, oks = 0, oks+1
				if oks == healthyAfter && !slices.Contains(lb.pool(), i) {
					lb.setHealthy(i, true)
					r.event("load balancer: %s in", n.Name)
				}
			} else {
				oks, fails = 0, fails+1
				if fails == unhealthyAfter && slices.Contains(lb.pool(), i) {
					lb.setHealthy(i, false)
					r.event("load balancer: %s out (%d %v)", n.Name, status, err)
				}
			}
			if err == nil && status != want {
				err = fmt.Errorf("status %d, want %d", status, want)
			}
			return err
		})
	}
	// Connections opened before a swap must outlive it: their conntrack
	// entries (DNAT, and SNAT for the NodePort) carry them, whichever
	// proxy runs. One connection each, reused for every request.
	for _, ka := range []struct {
		stream string
		from   *lab.Host
		addr   string
	}{
		{"ClusterIP keep-alive", c.Nodes[0].Pod("client"), fmt.Sprintf("%s:%d", webVIP, servicePort)},
		{"NodePort keep-alive", c.Client, fmt.Sprintf("%s:%d", c.Nodes[0].IPv4, webNodePort)},
	} {
		kept := newKeptAlive(ka.from.DialContext, ka.addr)
		first := ""
		loop(ctx, &wg, r, ka.stream, requestGap, func() error {
			alive := kept.ended == nil
			pod, err := keepAliveGet(kept)
			if alive && kept.ended != nil {
				r.event("%s: the connection to %s ended: %v\n%s", ka.stream, first, kept.ended, conntrackOf(c, kept))
			}
			if err != nil {
				return err
			}
			if first == "" {
				first = pod
			}
			if pod != first {
				return fmt.Errorf("the connection moved from %s to %s: it was re-established", first, pod)
			}
			return nil
		})
	}
	loop(ctx, &wg, r, "LoadBalancer (Local)", requestGap, func() error {
		i := lb.pick()
		if i < 0 {
			return fmt.Errorf("no node in the load balancer's pool")
		}
		n := c.Nodes[i]
		return getExpect(c.Client, fmt.Sprintf("http://%s:%d%s", n.IPv4, localNodePort, lab.ClientAddressURLPath), 200, func(body string) error {
			if want := n.Pod("web").Name + " " + c.Client.IPv4.String(); body != want {
				return fmt.Errorf("via %s: answer %q, want %q (local pod, client address kept)", n.Name, body, want)
			}
			return nil
		})
	})
	return func() { cancel(); wg.Wait() }
}

// keepAliveGet asks / on the kept-alive connection and returns the pod
// that answered.
func keepAliveGet(kept *keptAlive) (string, error) {
	status, body, err := kept.get("/")
	if err != nil {
		return "", err
	}
	if status != 200 || !strings.HasPrefix(body, "web-") {
		return "", fmt.Errorf("GET / on %s: %d %q", kept.addr, status, body)
	}
	return strings.TrimSpace(body), nil
}

// conntrackOf lists every node's conntrack entries of the kept-alive
// connection: which node still tracks it, in what state (CLOSE after a
// RST, TIME_WAIT or LAST_ACK after FINs), with what NAT.
func conntrackOf(c *lab.Cluster, kept *keptAlive) string {
	local, ok := kept.local()
	if !ok {
		return "(never connected)"
	}
	var b strings.Builder
	for _, n := range c.Nodes {
		out, err := n.Exec("conntrack", "-L", "-p", "tcp", "--orig-src", local.IP.String(), "--orig-port-src", strconv.Itoa(local.Port))
		if err != nil {
			fmt.Fprintf(&b, "%s: conntrack -L: %v\n", n.Name, err)
		}
		fmt.Fprintf(&b, "%s conntrack:\n%s", n.Name, out)
	}
	return b.String()
}
