package syncscale

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/engine"
)

// Polling: metrics are cheap to scrape, so a full sync's end is seen
// within metricsPoll.
const (
	metricsPoll = 50 * time.Millisecond
	// quietPoll is waitQuiet's polling, coarser: it waits seconds.
	quietPoll = 250 * time.Millisecond
	// quietFloor is the least time the sync count must stay put before a
	// measurement starts, so it does not queue behind a sync in progress.
	quietFloor = 1500 * time.Millisecond
	// metricsLag bounds the wait for a sync that is visibly done (its rule
	// is in the kernel, its client got an answer) to show in the metrics.
	metricsLag = 30 * time.Second
)

// RowLab is what the measurements of one row act on.
type RowLab struct {
	Spec     RowSpec
	Settings Settings
	Client   kubernetes.Interface
	// ClientHost asks the network-programming services; Server is their
	// real endpoint: a lab backend running ServeAnswers on EndpointPort.
	ClientHost *lab.Host
	Server     netip.Addr
	// Logf reports progress.
	Logf func(format string, args ...any)
	// Then, when set, runs after the measurements while the proxy still
	// runs (bench/modes measures the data plane there); its error fails
	// the measurement.
	Then func(ctx context.Context, proc *lab.Process) error
}

// Measure runs a proxy started by start through the row's measurements and
// stops it. nplBase numbers its network-programming services, so the two
// proxies of a row never reuse a name or ClusterIP.
func (l *RowLab) Measure(ctx context.Context, p Proxy, budget time.Duration, nplBase int, start func() *lab.Process) (Measured, error) {
	m := Measured{Budget: budget}
	t0 := time.Now()
	proc := start()
	defer func() {
		_ = StopGroup(proc, l.Logf)
		l.keepLog(p, proc)
	}()

	synced, err := l.waitFirstSync(ctx, proc, t0.Add(budget))
	if err != nil {
		return m, fmt.Errorf("%s: %w", p, err)
	}
	if synced.IsZero() {
		l.Logf("%s: first full sync still running after the %v budget", p, budget)
		m.OverBudget = true
		return m, nil
	}
	m.FullSync = synced.Sub(t0)
	// Memory first, before the listings below give the proxy time to
	// collect garbage or grow.
	if m.RSS, m.PeakRSS, err = ReadRSS(proc.Pid()); err != nil {
		return m, fmt.Errorf("%s: %w", p, err)
	}
	if m.CPU, err = ReadCPU(proc.Pid()); err != nil {
		return m, fmt.Errorf("%s: %w", p, err)
	}
	ss, err := Scrape(ctx, MetricsURL)
	if err != nil {
		return m, err
	}
	m.FullSyncHist = fromSeconds(ss.Histogram(FullSyncDuration, AnyFamily).Sum)
	failureMetric := RestoreFailures
	if l.Spec.Mode == NFTables {
		failureMetric = NFTablesSyncFailures
	}
	if failures, _ := ss.Sum(failureMetric, AnyFamily); failures > 0 {
		return m, fmt.Errorf("%s: %s is %v after the first sync; its log:\n%s", p, failureMetric, failures, logTail(proc))
	}
	_, userspace := l.Spec.Mode.Portals()
	if b, ok := l.Spec.Mode.Backend(); userspace {
		// The relays hold the services, not the kernel: bench/modes checks
		// them with traffic.
	} else if ok {
		dump, err := VerifyBackend(ctx, b, l.Spec.Services)
		if err != nil {
			return m, fmt.Errorf("%s after its first sync: %w", p, err)
		}
		m.Rules, m.DumpBytes = dump["nat"].Rules, dump.Total("nat", "filter").Bytes
	} else {
		st, text, err := VerifyNFTables(ctx, l.Spec.Services)
		if err != nil {
			return m, fmt.Errorf("%s after its first sync: %w", p, err)
		}
		m.Rules, m.DumpBytes = st.Rules, st.Bytes
		l.keep(p, "nft", text)
	}
	l.Logf("%s: first full sync %v (rules %v), %d rules, RSS %.1f MiB (peak %.1f MiB), CPU %v (children %v)", p, m.FullSync, m.FullSyncHist, m.Rules,
		float64(m.RSS)/(1<<20), float64(m.PeakRSS)/(1<<20), m.CPU.Self, m.CPU.Children)

	if err := l.measureChange(ctx, proc, &m); err != nil {
		return m, fmt.Errorf("%s, one change: %w", p, err)
	}
	l.Logf("%s: one change in the kernel after %v (sync %v, %d syncs; %d nat commits seen)", p, m.Change, m.ChangeHist, m.ChangeHistSyncs, m.Commits)
	for k := range l.Settings.NPLRepeats {
		d, err := l.measureNPL(ctx, proc, nplBase+k)
		if err != nil {
			return m, fmt.Errorf("%s, network programming latency: %w", p, err)
		}
		m.NPL = append(m.NPL, d)
	}
	l.Logf("%s: new services answered after %v (median %v)", p, m.NPL, m.NPLMedian())
	if l.Then != nil {
		if err := l.Then(ctx, proc); err != nil {
			return m, fmt.Errorf("%s: %w", p, err)
		}
	}
	return m, StopGroup(proc, l.Logf)
}

// keepLog copies proc's log to the settings' LogDir, if any.
func (l *RowLab) keepLog(p Proxy, proc *lab.Process) { l.keep(p, "log", proc.Log()) }

// keep writes text to ROW-PROXY.ext in the settings' LogDir, if any.
func (l *RowLab) keep(p Proxy, ext, text string) {
	if l.Settings.LogDir == "" {
		return
	}
	dst := filepath.Join(l.Settings.LogDir, fmt.Sprintf("%s-%s.%s", l.Spec.Name(), p, ext))
	if err := os.WriteFile(dst, []byte(text), 0o644); err != nil {
		l.Logf("keeping %s: %v", dst, err)
	}
}

// waitFirstSync returns when the proxy's first IPv4 sync finished, or the
// zero time if it had not by deadline.
func (l *RowLab) waitFirstSync(ctx context.Context, proc *lab.Process, deadline time.Time) (time.Time, error) {
	for {
		select {
		case <-proc.Exited():
			return time.Time{}, fmt.Errorf("exited (%v) before its first sync; its log:\n%s", proc.Err(), logTail(proc))
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		default:
		}
		if ss, err := Scrape(ctx, MetricsURL); err == nil {
			if ss.Histogram(SyncDuration, IPv4).Count >= 1 {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, nil
		}
		time.Sleep(metricsPoll)
	}
}

// waitQuiet waits until the proxy's sync count has not moved for quietFor
// and returns the metrics then.
func (l *RowLab) waitQuiet(ctx context.Context, proc *lab.Process) (Samples, error) {
	bound := l.Settings.KproxyBudget + l.Settings.KubeProxyBudget
	deadline := time.Now().Add(bound)
	var last float64 = -1
	since := time.Now()
	for {
		if err := alive(proc); err != nil {
			return nil, err
		}
		ss, err := Scrape(ctx, MetricsURL)
		if err != nil {
			return nil, err
		}
		n := ss.Histogram(SyncDuration, AnyFamily).Count
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quietFor(l.Settings) {
			return ss, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("still syncing (%v syncs so far) after %v", n, bound)
		}
		time.Sleep(quietPoll)
	}
}

// quietFor is how long waitQuiet wants the proxy idle: long enough for
// its whole burst of syncs (engine.DefaultBurst, as kube-proxy's) to come back at
// one per minimum sync period. A new service takes two syncs when its
// EndpointSlice lands after the first (a fast mode's sync ends before the
// slice arrives); measured sooner, the second would wait for a token the
// previous measurement spent, and the figure would time the benchmark's
// own pace rather than a service created on an idle node.
func quietFor(s Settings) time.Duration {
	return max(quietFloor, engine.DefaultBurst*s.MinSyncPeriod+quietPoll)
}

// waitSyncs waits until the IPv4 sync count has grown past before's.
func (l *RowLab) waitSyncs(ctx context.Context, before Samples, deadline time.Time) (Samples, error) {
	n := before.Histogram(SyncDuration, IPv4).Count
	for {
		ss, err := Scrape(ctx, MetricsURL)
		if err != nil {
			return nil, err
		}
		if ss.Histogram(SyncDuration, IPv4).Count > n {
			return ss, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the rule is in the kernel, but the sync count stayed at %v", n)
		}
		time.Sleep(metricsPoll)
	}
}

// alive is nil while proc runs, and an error with its log once it exited.
func alive(proc *lab.Process) error {
	select {
	case <-proc.Exited():
		return fmt.Errorf("%s exited (%v); its log:\n%s", proc, proc.Err(), logTail(proc))
	default:
		return nil
	}
}

// logTail is the end of a process's log, for errors.
func logTail(proc *lab.Process) string {
	log := proc.Log()
	if len(log) > 6000 {
		log = "…" + log[len(log)-6000:]
	}
	return log
}

// fromSeconds converts a histogram sum in seconds to a duration.
func fromSeconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
