package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/runner"
	"kproxy.dev/kproxy/sync/serve/healthz"
	"kproxy.dev/kproxy/sync/servicemap"
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

func portName(name string) servicemap.ServicePortName {
	return servicemap.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: "default", Name: name},
		Port:           "http",
		Protocol:       v1.ProtocolTCP,
	}
}

// fakeMap hands out empty snapshots with whatever change set the test queued.
type fakeMap struct {
	mu         sync.Mutex
	synced     bool
	gen        uint64
	node       *servicemap.NodeInfo
	next       *servicemap.ChangeSet
	pendingSvc int
	pendingEp  int
}

func (f *fakeMap) Snapshot() (*servicemap.Snapshot, *servicemap.ChangeSet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	cs := f.next
	if cs == nil {
		cs = &servicemap.ChangeSet{}
	}
	f.next, f.pendingSvc, f.pendingEp = nil, 0, 0
	cs.Full = cs.Full || f.gen == 1
	return &servicemap.Snapshot{Generation: f.gen, Node: f.node}, cs
}

func (f *fakeMap) Synced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

func (f *fakeMap) Pending() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pendingSvc, f.pendingEp
}

func (f *fakeMap) queue(cs *servicemap.ChangeSet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = cs
}

// call is what the fake mode saw in one Sync.
type call struct {
	Generation uint64
	Full       bool
	Changed    []servicemap.ServicePortName
	Failed     bool
}

// fakeMode records its syncs and fails on demand.
type fakeMode struct {
	mu     sync.Mutex
	calls  []call
	fails  int
	onSync func(snap *servicemap.Snapshot, cs *servicemap.ChangeSet)
}

func (m *fakeMode) Name() mode.Name { return "fake" }
func (m *fakeMode) Close() error    { return nil }

func (m *fakeMode) Sync(_ context.Context, snap *servicemap.Snapshot, cs *servicemap.ChangeSet) error {
	if m.onSync != nil {
		m.onSync(snap, cs)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := call{Generation: snap.Generation, Full: cs.Full, Changed: slices.Clone(cs.Changed)}
	if m.fails > 0 {
		m.fails--
		c.Failed = true
		m.calls = append(m.calls, c)
		return errors.New("injected mode failure")
	}
	m.calls = append(m.calls, c)
	return nil
}

func (m *fakeMode) takeCalls() []call {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.calls
	m.calls = nil
	return c
}

func (m *fakeMode) failNext(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fails = n
}

type fixture struct {
	ctx     context.Context
	smap    *fakeMap
	mode    *fakeMode
	metrics *metrics.Metrics
	health  *healthz.Health
	clock   *clocktesting.FakeClock
	engine  *Engine
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t) // logs go to the test's output
	f := &fixture{ctx: ctx, smap: &fakeMap{}, mode: &fakeMode{}, metrics: metrics.New(), clock: clocktesting.NewFakeClock(t0)}
	f.health = healthz.New(time.Minute, f.metrics, f.clock)
	e, err := New(Config{Map: f.smap, Mode: f.mode, Metrics: f.metrics, Health: f.health,
		SyncPeriod: 30 * time.Second, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.engine = e
	return f
}

// tick runs one sync the way the runner would, for the given reason.
func (f *fixture) tick(reason runner.Reason) error {
	return f.engine.sync(f.ctx, reason)
}

func TestSyncSequence(t *testing.T) {
	a, b, c := portName("a"), portName("b"), portName("c")
	type step struct {
		synced   bool
		queue    *servicemap.ChangeSet
		fail     bool
		reason   runner.Reason
		advance  time.Duration // the clock moves this much before the step
		wantCall *call         // nil: the mode is not called
		wantErr  bool
		wantLast uint64 // LastSynced generation; 0: none yet
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "nothing happens until the map is synced",
			steps: []step{
				{synced: false, wantLast: 0},
				{synced: false, reason: runner.Periodic, wantLast: 0},
				{synced: true, wantCall: &call{Generation: 1, Full: true}, wantLast: 1},
			},
		},
		{
			name: "first sync is full and later ones carry only their changes",
			steps: []step{
				{synced: true, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{a}},
					wantCall: &call{Generation: 1, Full: true, Changed: []servicemap.ServicePortName{a}}, wantLast: 1},
				{synced: true, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{b}},
					wantCall: &call{Generation: 2, Changed: []servicemap.ServicePortName{b}}, wantLast: 2},
			},
		},
		{
			name: "an empty change set skips the mode unless the sync is periodic",
			steps: []step{
				{synced: true, wantCall: &call{Generation: 1, Full: true}, wantLast: 1},
				{synced: true, wantLast: 2},
				{synced: true, queue: &servicemap.ChangeSet{ServiceChanges: 1}, wantLast: 3}, // an event that changed nothing
				{synced: true, reason: runner.Periodic, wantCall: &call{Generation: 4}, wantLast: 4},
				{synced: true, reason: runner.Periodic, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{a}},
					wantCall: &call{Generation: 5, Changed: []servicemap.ServicePortName{a}}, wantLast: 5},
			},
		},
		{
			name: "a periodic sync is full once the last full sync is an hour old",
			steps: []step{
				{synced: true, wantCall: &call{Generation: 1, Full: true}, wantLast: 1},
				{synced: true, reason: runner.Periodic, advance: 59 * time.Minute, wantCall: &call{Generation: 2}, wantLast: 2},
				{synced: true, reason: runner.Periodic, advance: time.Minute, wantCall: &call{Generation: 3, Full: true}, wantLast: 3},
				{synced: true, reason: runner.Periodic, advance: 30 * time.Second, wantCall: &call{Generation: 4}, wantLast: 4},
			},
		},
		{
			name: "a failed sync is retried with its changes merged into the next",
			steps: []step{
				{synced: true, wantCall: &call{Generation: 1, Full: true}, wantLast: 1},
				{synced: true, fail: true, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{a, c}},
					wantCall: &call{Generation: 2, Changed: []servicemap.ServicePortName{a, c}, Failed: true}, wantErr: true, wantLast: 1},
				{synced: true, reason: runner.Retry, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{b}},
					wantCall: &call{Generation: 3, Changed: []servicemap.ServicePortName{a, b, c}}, wantLast: 3},
				{synced: true, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{c}},
					wantCall: &call{Generation: 4, Changed: []servicemap.ServicePortName{c}}, wantLast: 4},
			},
		},
		{
			name: "a failed first sync stays full on retry, even with nothing new",
			steps: []step{
				{synced: true, fail: true, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{a}},
					wantCall: &call{Generation: 1, Full: true, Changed: []servicemap.ServicePortName{a}, Failed: true}, wantErr: true},
				{synced: true, reason: runner.Retry,
					wantCall: &call{Generation: 2, Full: true, Changed: []servicemap.ServicePortName{a}}, wantLast: 2},
			},
		},
		{
			name: "repeated failures keep accumulating changes",
			steps: []step{
				{synced: true, wantCall: &call{Generation: 1, Full: true}, wantLast: 1},
				{synced: true, fail: true, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{c}},
					wantCall: &call{Generation: 2, Changed: []servicemap.ServicePortName{c}, Failed: true}, wantErr: true, wantLast: 1},
				{synced: true, fail: true, reason: runner.Retry, queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{a}},
					wantCall: &call{Generation: 3, Changed: []servicemap.ServicePortName{a, c}, Failed: true}, wantErr: true, wantLast: 1},
				{synced: true, reason: runner.Retry,
					wantCall: &call{Generation: 4, Changed: []servicemap.ServicePortName{a, c}}, wantLast: 4},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			failures := 0
			for i, s := range tt.steps {
				f.smap.mu.Lock()
				f.smap.synced = s.synced
				f.smap.mu.Unlock()
				if s.queue != nil {
					f.smap.queue(s.queue)
				}
				f.clock.Step(s.advance)
				if s.fail {
					f.mode.failNext(1)
					failures++
				}
				err := f.tick(s.reason)
				if (err != nil) != s.wantErr {
					t.Errorf("step %d: sync error = %v, want error %v", i, err, s.wantErr)
				}
				var want []call
				if s.wantCall != nil {
					want = []call{*s.wantCall}
				}
				if diff := cmp.Diff(want, f.mode.takeCalls()); diff != "" {
					t.Errorf("step %d: mode calls (-want +got):\n%s", i, diff)
				}
				var gotLast uint64
				if last := lastSynced(f.engine); last != nil {
					gotLast = last.Generation
				}
				if gotLast != s.wantLast {
					t.Errorf("step %d: LastSynced generation %d, want %d", i, gotLast, s.wantLast)
				}
			}
			if got := testutil.ToFloat64(f.metrics.SyncFailuresTotal); got != float64(failures) {
				t.Errorf("kproxy_sync_failures_total = %v, want %d", got, failures)
			}
		})
	}
}

// near compares metric values to a microsecond, the precision a float64
// Unix timestamp has.
func near(got, want float64) bool { return got > want-1e-6 && got < want+1e-6 }

// histogram returns a histogram's sample count and sum.
// histogram reads the one histogram h collects (one IP family).
func histogram(t *testing.T, h prometheus.Collector) (uint64, float64) {
	t.Helper()
	ch := make(chan prometheus.Metric, 2)
	h.Collect(ch)
	close(ch)
	if len(ch) != 1 {
		t.Fatalf("%d histograms collected, want 1", len(ch))
	}
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestSyncMetrics(t *testing.T) {
	f := newFixture(t)
	f.smap.synced = true
	syncTakes := 250 * time.Millisecond
	f.mode.onSync = func(*servicemap.Snapshot, *servicemap.ChangeSet) { f.clock.Step(syncTakes) }

	// First sync: nothing queued yet.
	if err := f.tick(runner.Requested); err != nil {
		t.Fatal(err)
	}
	// Events arrive: the notification stamps the queue time and pending counts.
	f.clock.Step(10 * time.Second)
	f.smap.mu.Lock()
	f.smap.pendingSvc, f.smap.pendingEp = 2, 5
	f.smap.mu.Unlock()
	f.engine.Notify()
	queuedAt := f.clock.Now()
	f.smap.queue(&servicemap.ChangeSet{
		Changed:         []servicemap.ServicePortName{portName("a"), portName("b")},
		ServiceChanges:  2,
		EndpointChanges: 5,
		FirstEvent:      queuedAt.Add(-3 * time.Second),
		TriggerTimes: map[servicemap.ServicePortName]time.Time{
			portName("a"): queuedAt.Add(-7 * time.Second),
			portName("b"): queuedAt.Add(time.Hour), // skewed into the future: ignored
		},
	})
	if got := testutil.ToFloat64(f.metrics.ServiceChangesPending); got != 2 {
		t.Errorf("service changes pending after Notify = %v, want 2", got)
	}
	if got, want := testutil.ToFloat64(f.metrics.LastQueuedTimestamp), float64(queuedAt.UnixMilli())/1e3; !near(got, want) {
		t.Errorf("last queued timestamp = %v, want %v", got, want)
	}

	// A failed attempt counts a failure and a duration but no changes.
	f.mode.failNext(1)
	if err := f.tick(runner.Requested); err == nil {
		t.Fatal("sync with a failing mode succeeded")
	}
	if got := testutil.ToFloat64(f.metrics.ServiceChangesTotal); got != 0 {
		t.Errorf("service changes total after a failure = %v, want 0", got)
	}
	f.clock.Step(time.Second)
	if err := f.tick(runner.Retry); err != nil {
		t.Fatal(err)
	}
	end := f.clock.Now()

	gauges := []struct {
		name string
		g    prometheus.Collector
		want float64
	}{
		{"service changes total", f.metrics.ServiceChangesTotal, 2},
		{"endpoint changes total", f.metrics.EndpointChangesTotal, 5},
		{"service changes pending", f.metrics.ServiceChangesPending, 0},
		{"endpoint changes pending", f.metrics.EndpointChangesPending, 0},
		{"last sync timestamp", f.metrics.SyncLastTimestamp, float64(end.UnixMilli()) / 1e3},
		{"sync failures", f.metrics.SyncFailuresTotal, 1},
		{"service ports", f.metrics.ServicePorts, 0},
	}
	for _, g := range gauges {
		if got := testutil.ToFloat64(g.g); !near(got, g.want) {
			t.Errorf("%s = %v, want %v", g.name, got, g.want)
		}
	}
	histograms := []struct {
		name      string
		h         prometheus.Collector
		wantCount uint64
		wantSum   float64
	}{
		// Three mode calls: the first sync, the failure and the retry.
		{"sync duration", f.metrics.SyncDuration, 3, 3 * syncTakes.Seconds()},
		// From trigger time to the end of the successful sync.
		{"network programming", f.metrics.NetworkProgrammingDuration, 1, end.Sub(queuedAt.Add(-7 * time.Second)).Seconds()},
		{"event to sync", f.metrics.EventToSyncDuration, 1, end.Sub(queuedAt.Add(-3 * time.Second)).Seconds()},
	}
	for _, h := range histograms {
		count, sum := histogram(t, h.h)
		if count != h.wantCount || !near(sum, h.wantSum) {
			t.Errorf("%s: count %d sum %v, want %d and %v", h.name, count, sum, h.wantCount, h.wantSum)
		}
	}
}

func TestHealthTransitions(t *testing.T) {
	f := newFixture(t)
	f.smap.synced = true
	status := func() bool { return f.health.Status().Healthy }

	if !status() {
		t.Fatal("unhealthy before any change")
	}
	f.engine.Notify()
	f.mode.failNext(3)
	for range 3 {
		f.clock.Step(30 * time.Second)
		_ = f.tick(runner.Retry)
	}
	if status() {
		t.Fatal("healthy with a change queued and unapplied for 90s (timeout 60s)")
	}
	if err := f.tick(runner.Retry); err != nil {
		t.Fatal(err)
	}
	if !status() {
		t.Fatal("unhealthy after a successful sync")
	}

	// The cluster autoscaler taints the node for deletion: /healthz fails,
	// as kube-proxy's does; the taint goes: eligible again.
	for _, st := range []struct {
		taint, want bool
	}{{true, false}, {false, true}} {
		f.smap.mu.Lock()
		f.smap.node = &servicemap.NodeInfo{Name: "node-a", ToBeDeleted: st.taint}
		f.smap.mu.Unlock()
		if err := f.tick(runner.Requested); err != nil {
			t.Fatal(err)
		}
		if got := f.health.NodeEligible(); got != st.want {
			t.Errorf("ToBeDeletedByClusterAutoscaler taint %v: node eligible = %v, want %v", st.taint, got, st.want)
		}
	}

	// The node starts being deleted: /healthz fails, /livez does not.
	f.smap.mu.Lock()
	f.smap.node = &servicemap.NodeInfo{Name: "node-a", Deleting: true}
	f.smap.mu.Unlock()
	if err := f.tick(runner.Requested); err != nil {
		t.Fatal(err)
	}
	if f.health.NodeEligible() {
		t.Error("node eligible while being deleted")
	}
	// The Node object disappears: still not eligible.
	f.smap.mu.Lock()
	f.smap.node = nil
	f.smap.mu.Unlock()
	if err := f.tick(runner.Requested); err != nil {
		t.Fatal(err)
	}
	if f.health.NodeEligible() {
		t.Error("node eligible after its Node object was deleted")
	}
}

func TestNodeNeverSeenStaysEligible(t *testing.T) {
	f := newFixture(t)
	f.smap.synced = true
	f.health.SetNodeEligible(true)
	if err := f.tick(runner.Requested); err != nil {
		t.Fatal(err)
	}
	if !f.health.NodeEligible() {
		t.Error("a map with no Node object made the node ineligible")
	}
}

func TestWaitForGeneration(t *testing.T) {
	f := newFixture(t)
	f.smap.synced = true
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.engine.WaitForGeneration(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForGeneration before any sync with a cancelled context = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- f.engine.WaitForGeneration(context.Background(), 2) }()
	for range 2 {
		if err := f.tick(runner.Requested); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // deadlock guard
		t.Fatal("WaitForGeneration(2) did not return after generation 2 synced")
	}
	if err := f.engine.WaitForGeneration(ctx, 1); err != nil {
		t.Errorf("WaitForGeneration of an already synced generation = %v", err)
	}
}

func TestInForceIsTheLastSnapshotSynced(t *testing.T) {
	f := newFixture(t)
	f.smap.synced = true
	if got := f.engine.InForce(); got != nil {
		t.Fatalf("InForce before any sync = generation %d, want nil", got.Generation)
	}
	for want := uint64(1); want <= 2; want++ {
		if err := f.tick(runner.Requested); err != nil {
			t.Fatal(err)
		}
		if got := f.engine.InForce(); got == nil || got.Generation != want {
			t.Errorf("InForce after sync %d = %+v", want, got)
		}
	}
}

func TestNotifyOnNilEngine(t *testing.T) {
	var e *Engine
	e.Notify() // must not panic: the Tracker may call back before New returns
}

func TestNewRequiresParts(t *testing.T) {
	m := metrics.New()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no map", Config{Mode: &fakeMode{}, Metrics: m, Health: healthz.New(time.Minute, m, nil)}},
		{"no mode", Config{Map: &fakeMap{}, Metrics: m, Health: healthz.New(time.Minute, m, nil)}},
		{"no metrics", Config{Map: &fakeMap{}, Mode: &fakeMode{}, Health: healthz.New(time.Minute, m, nil)}},
		{"no health", Config{Map: &fakeMap{}, Mode: &fakeMode{}, Metrics: m}},
		{"min above max", Config{Map: &fakeMap{}, Mode: &fakeMode{}, Metrics: m, Health: healthz.New(time.Minute, m, nil),
			MinSyncPeriod: time.Minute, SyncPeriod: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Error("New accepted an incomplete config")
			}
		})
	}
}

// lastSynced returns the snapshot the mode last synced successfully (nil
// before the first success).
func lastSynced(e *Engine) *servicemap.Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastGood
}

// TestFirstSyncNotDelayedByEventsBeforeSynced: events that arrive while the
// informers are still listing must not use up the runner's burst, or the
// first real sync waits out the minimum sync period (seen as a 1 s delay at
// start, against kube-proxy syncing at once).
func TestFirstSyncNotDelayedByEventsBeforeSynced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	smap, fm, met := &fakeMap{}, &fakeMode{}, metrics.New()
	clk := clocktesting.NewFakeClock(t0) // never stepped: a sync that waits for the rate limit never comes
	e, err := New(Config{Map: smap, Mode: fm, Metrics: met, Health: healthz.New(time.Minute, met, clk),
		SyncPeriod: 30 * time.Second, MinSyncPeriod: time.Second, Burst: 2, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	for range 5 {
		e.Notify() // the initial list, before the map is synced
		time.Sleep(5 * time.Millisecond)
	}
	smap.mu.Lock()
	smap.synced = true
	smap.mu.Unlock()
	e.Notify() // OnSynced
	deadline := time.Now().Add(5 * time.Second)
	for len(fm.callsSoFar()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sync after the map synced without the clock moving: pre-sync events spent the burst")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// callsSoFar returns the calls so far without consuming them.
func (m *fakeMode) callsSoFar() []call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}
