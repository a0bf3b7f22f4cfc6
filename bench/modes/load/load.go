// Package load runs the side-by-side benchmark's four data-plane workloads
// (bench/modes) from a lab client through a path to the lab backend's
// servers and measures the whole machine's CPU per request. It is the
// data-plane benchmark's (bench/dataplane) load generators made importable:
// wrk for keep-alive and new-connection HTTP, closed-loop UDP
// request/response, and new UDP flows in a process of their own.
package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"kproxy.dev/kproxy/bench/dataplane"
	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// Workload IDs: the same strings as modes.Workload* (bench/modes), which
// this package does not import (modes imports it).
const (
	KeepAlive = "keepalive"
	NewConn   = "newconn"
	UDPRR     = "udp-rr"
	UDPFlows  = "udp-flows"
)

// Workloads lists the workload IDs in table order.
func Workloads() []string { return []string{KeepAlive, NewConn, UDPRR, UDPFlows} }

// Load settings, as bench/dataplane's, so figures compare with its tables.
const (
	wrkThreads = 2
	wrkConns   = 32
	// udpRRFlows long-lived flows each keep one udpPayload datagram
	// outstanding; one lost waits out udpRRTimeout.
	udpRRFlows   = 16
	udpPayload   = 64
	udpRRTimeout = 100 * time.Millisecond
	// New UDP flows: 16 workers over 8 client addresses and ports
	// 10000-65000 give 440,000 source pairs, so a pair comes back only
	// after tens of seconds at the rates measured, long after the node's
	// conntrack entry (2 s, PrepareHosts) and a relay's flow expired.
	udpFlowWorkers = 16
	udpFlowTimeout = 200 * time.Millisecond
	udpFlowPortLo  = 10000
	udpFlowPortHi  = 65000
	// wrkGrace and flowGrace bound a load generator process beyond its
	// run: one still running then is killed and the run is an error.
	// Before its run wrk opens one connection and waits for it (its
	// address check, a blocking connect): each SYN lost there costs a
	// retransmission timeout (1 s, then 2 s, 4 s on the guest's kernel),
	// and a VIP that drops or loops every SYN keeps it there for minutes.
	// The grace covers three lost SYNs and the process's start and exit
	// on a busy machine: in the guest kernel on a loaded host, wrk's
	// one-second runs took up to 3.1 s with no SYN lost. It is scaled in
	// the guest (guest.Scale).
	wrkGrace  = 10 * time.Second
	flowGrace = 10 * time.Second
)

// udpFlowSources are the client addresses new UDP flows come from
// (PrepareHosts adds them to the client's eth0).
func udpFlowSources() []netip.Addr {
	var out []netip.Addr
	for i := range 8 {
		out = append(out, netip.AddrFrom4([4]byte{198, 19, 0, byte(100 + i)}))
	}
	return out
}

// Target is where a workload sends traffic: from Client to HTTP (nginx,
// lab.NginxPort on the backend, usually through a service VIP) and UDP (the
// plain UDP echo, lab.UDPPlainEchoPort).
type Target struct {
	Client    *lab.Host
	HTTP, UDP netip.AddrPort
}

// ErrNothingAnswered marks a run in which no request (flow) was answered.
var ErrNothingAnswered = errors.New("nothing answered")

// Result is one run of one workload.
type Result struct {
	Rate     float64       // requests (flows) per second
	P50, P99 time.Duration // zero for new UDP flows
	Ops      int64         // requests (flows) answered
	Errors   int64         // lost datagrams, socket errors, non-2xx
	BusyCPU  time.Duration // the machine's busy CPU time over the run (/proc/stat, all CPUs)
	Elapsed  time.Duration
}

// CPUPerOp is the machine's busy CPU time per answered request (flow), 0
// if none was answered.
func (r Result) CPUPerOp() time.Duration {
	if r.Ops <= 0 {
		return 0
	}
	return r.BusyCPU / time.Duration(r.Ops)
}

// Run runs workload from t.Client to t for about d (wrk's runs are whole
// seconds, d rounded up) and measures it. A run
// where nothing was answered, or where an HTTP response was not 2xx/3xx,
// is an error naming the workload and the target; so is ctx ending before
// the run did.
func Run(ctx context.Context, workload string, t Target, d time.Duration) (Result, error) {
	if t.Client == nil {
		return Result{}, fmt.Errorf("%s: no client host", workload)
	}
	if d <= 0 {
		return Result{}, fmt.Errorf("%s: run length %v, want > 0", workload, d)
	}
	var run func(context.Context, Target, time.Duration) (Result, error)
	var to netip.AddrPort
	switch workload {
	case KeepAlive:
		run, to = func(ctx context.Context, t Target, d time.Duration) (Result, error) { return runWrk(ctx, t, d, false) }, t.HTTP
	case NewConn:
		run, to = func(ctx context.Context, t Target, d time.Duration) (Result, error) { return runWrk(ctx, t, d, true) }, t.HTTP
	case UDPRR:
		run, to = runUDPRR, t.UDP
	case UDPFlows:
		run, to = runUDPFlows, t.UDP
	default:
		return Result{}, fmt.Errorf("unknown workload %q (want one of %q)", workload, Workloads())
	}
	if !to.IsValid() {
		return Result{}, fmt.Errorf("%s: the target has no address for it (%+v)", workload, t)
	}
	before, err := machineCPU()
	if err != nil {
		return Result{}, fmt.Errorf("%s to %s: %w", workload, to, err)
	}
	res, err := run(ctx, t, d)
	if after, cerr := machineCPU(); cerr == nil {
		res.BusyCPU = after.Busy - before.Busy
	} else if err == nil {
		err = cerr
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("stopped: %w", context.Cause(ctx))
	}
	if err == nil {
		err = res.check()
	}
	if err != nil {
		return res, fmt.Errorf("%s to %s: %w", workload, to, err)
	}
	return res, nil
}

// check rejects a run that was not measured.
func (r Result) check() error {
	if r.Ops <= 0 {
		return fmt.Errorf("%w (%d errors in %v)", ErrNothingAnswered, r.Errors, r.Elapsed.Round(time.Millisecond))
	}
	return nil
}

// machineCPU reads /proc/stat, which every network namespace shares.
func machineCPU() (dataplane.MachineCPU, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return dataplane.MachineCPU{}, fmt.Errorf("reading the machine's CPU time: %w", err)
	}
	return dataplane.ParseMachineCPU(string(stat))
}

// wrkArgs are wrk's arguments for a run of d (whole seconds, at least one:
// wrk takes no fractions).
func wrkArgs(to netip.AddrPort, d time.Duration, newConnections bool) []string {
	args := []string{"-t", strconv.Itoa(wrkThreads), "-c", strconv.Itoa(wrkConns), "-d", strconv.Itoa(wrkSeconds(d)) + "s", "--latency"}
	if newConnections {
		args = append(args, "-H", "Connection: close")
	}
	return append(args, "http://"+to.String()+"/")
}

// wrkSeconds is how long wrk runs for a run of d: whole seconds, at
// least one (wrk takes no fractions).
func wrkSeconds(d time.Duration) int {
	return max(int((d+time.Second-1)/time.Second), 1)
}

// wrkLimit is how long a wrk run of d may take before it is killed: the
// run wrk makes (whole seconds, not d) and wrkGrace, scaled in the guest.
func wrkLimit(d time.Duration) time.Duration {
	return time.Duration(wrkSeconds(d))*time.Second + guest.Scale(wrkGrace)
}

func runWrk(ctx context.Context, t Target, d time.Duration, newConnections bool) (Result, error) {
	start := time.Now()
	out, err := runCommand(ctx, t.Client, wrkLimit(d), "wrk", wrkArgs(t.HTTP, d, newConnections)...)
	elapsed := time.Since(start)
	if errors.Is(err, errOverran) {
		return Result{Elapsed: elapsed}, fmt.Errorf("nothing answered? (wrk's own first connection never opened, or the machine is too slow for a %d s run): %w",
			wrkSeconds(d), err)
	}
	if err != nil {
		return Result{Elapsed: elapsed}, err
	}
	return wrkResult(out, elapsed)
}

// wrkResult turns wrk's output into a Result; non-2xx/3xx responses are an
// error, a run without any answered request too.
func wrkResult(out string, elapsed time.Duration) (Result, error) {
	w, err := dataplane.ParseWrk(out)
	if err != nil {
		// wrk prints no percentiles when no request completed.
		if zeroRequests.MatchString(out) {
			return Result{Elapsed: elapsed}, fmt.Errorf("%w:\n%s", ErrNothingAnswered, clip(out))
		}
		return Result{Elapsed: elapsed}, err
	}
	res := Result{
		Rate: w.RequestsPerSecond, P50: w.P50, P99: w.P99,
		Ops: w.Requests, Errors: w.SocketErrors + w.Non2xx, Elapsed: elapsed,
	}
	if w.Non2xx > 0 {
		return res, fmt.Errorf("%d of %d responses not 2xx/3xx:\n%s", w.Non2xx, w.Requests, clip(out))
	}
	if w.Requests <= 0 {
		return res, fmt.Errorf("%w:\n%s", ErrNothingAnswered, clip(out))
	}
	return res, nil
}

// runUDPRR keeps udpRRFlows long-lived flows from the client, each with
// one datagram outstanding, for d and counts the replies; a datagram lost
// on the way waits out udpRRTimeout and counts as an error.
func runUDPRR(ctx context.Context, t Target, d time.Duration) (Result, error) {
	conns := make([]net.Conn, 0, udpRRFlows)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Sockets stay in the namespace they were created in.
	err := t.Client.InNetns(func() error {
		for range udpRRFlows {
			c, err := net.Dial("udp", t.UDP.String())
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("opening the flows on %s: %w", t.Client, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var replies, lost atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	// Each flow's round-trip times, for p50/p99: one slice per flow, so
	// recording takes no lock.
	rtts := make([][]time.Duration, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, buf := make([]byte, udpPayload), make([]byte, 2048)
			for ctx.Err() == nil {
				sent := time.Now()
				if _, err := c.Write(msg); err != nil {
					lost.Add(1)
					// An ICMP error (nothing listens) fails at once: do
					// not spin.
					pause(ctx, udpRRTimeout)
					continue
				}
				_ = c.SetReadDeadline(time.Now().Add(udpRRTimeout))
				if n, err := c.Read(buf); err != nil || n != udpPayload {
					lost.Add(1)
					if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
						pause(ctx, udpRRTimeout)
					}
					continue
				}
				rtts[i] = append(rtts[i], time.Since(sent))
				replies.Add(1)
			}
		}()
	}
	wg.Wait()
	res := Result{Ops: replies.Load(), Errors: lost.Load(), Elapsed: time.Since(start)}
	if res.Elapsed > 0 {
		res.Rate = float64(res.Ops) / res.Elapsed.Seconds()
	}
	res.P50, res.P99 = percentiles(slices.Concat(rtts...))
	return res, nil
}

// percentiles returns the 50th and 99th percentiles of ds (zero for none);
// it sorts ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(int(q*float64(len(ds))), len(ds)-1)] }
	return at(0.50), at(0.99)
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// runUDPFlows runs the new-UDP-flow client in the client's namespace as a
// process of its own (this binary again, see ChildMain): its goroutines
// open thousands of sockets, which must all be in the client's namespace.
func runUDPFlows(ctx context.Context, t Target, d time.Duration) (Result, error) {
	self, err := os.Executable()
	if err != nil {
		return Result{}, fmt.Errorf("finding this binary to run the flow client: %w", err)
	}
	start := time.Now()
	out, err := runCommand(ctx, t.Client, d+flowGrace, self, flowArgs(t.UDP, d, udpFlowSources())...)
	elapsed := time.Since(start)
	if err != nil {
		return Result{Elapsed: elapsed}, err
	}
	f, err := dataplane.ParseUDPFlowsResult(out)
	if err != nil {
		return Result{Elapsed: elapsed}, err
	}
	return Result{Rate: f.Rate(), Ops: f.Flows, Errors: f.Lost, Elapsed: f.Elapsed}, nil
}

func clip(s string) string {
	const max = 2000
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
