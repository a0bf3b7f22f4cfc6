// Package engine is the loop between the service map and a proxy mode: it
// turns "something changed" notifications into rate-limited mode syncs,
// retries failures with the changes merged, and keeps the health status and
// sync metrics up to date.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/runner"
	"kproxy.dev/kproxy/sync/serve/healthz"
	"kproxy.dev/kproxy/sync/servicemap"
)

// ServiceMap is what the engine needs from the service map.
type ServiceMap interface {
	// Snapshot returns a new snapshot and what changed since the previous
	// call (Full on the first call).
	Snapshot() (*servicemap.Snapshot, *servicemap.ChangeSet)
	// Synced says the sources delivered their initial state.
	Synced() bool
	// Pending counts service and endpoint events not yet in a snapshot.
	Pending() (services, endpoints int)
}

var _ ServiceMap = (*servicemap.Tracker)(nil)

// Defaults follow kube-proxy's iptables mode.
const (
	DefaultMinSyncPeriod = time.Second
	DefaultSyncPeriod    = 30 * time.Second
	DefaultBurst         = 2
	// DefaultFullSyncPeriod is kube-proxy's: periodic syncs rewrite
	// everything at most this often; in between they only let the mode
	// verify its kernel state (an iptables canary, for instance).
	DefaultFullSyncPeriod = time.Hour
)

// Config configures an Engine. Map, Mode, Metrics and Health are required.
type Config struct {
	Map     ServiceMap
	Mode    mode.Mode
	Metrics *metrics.Metrics
	Health  *healthz.Health

	// MinSyncPeriod is the least time between syncs once Burst is spent.
	// Zero means DefaultMinSyncPeriod; use a negative value for no limit.
	MinSyncPeriod time.Duration
	// SyncPeriod is the longest time without a sync. A periodic sync always
	// reaches the mode, even with nothing changed, so it can check that its
	// kernel state is intact; it is a full resync when the last full one
	// is FullSyncPeriod old. Zero means DefaultSyncPeriod.
	SyncPeriod time.Duration
	// FullSyncPeriod: see SyncPeriod. Zero means DefaultFullSyncPeriod; a
	// negative value makes every periodic sync full.
	FullSyncPeriod time.Duration
	// Burst is how many syncs may run back to back; zero means DefaultBurst.
	Burst int
	// RetryInterval is how long after a failed sync it is retried (never
	// sooner than MinSyncPeriod allows). Zero means SyncPeriod, as
	// kube-proxy does.
	RetryInterval time.Duration
	// Clock defaults to the wall clock.
	Clock clock.Clock
	// ServiceHealth, if set, is given every snapshot the mode is given, to
	// serve the health-check node ports of externalTrafficPolicy=Local
	// services (sync/serve/servicehealth).
	ServiceHealth interface {
		Sync(*servicemap.Snapshot) error
	}
	// Observers are told about every successful mode sync, in order (such
	// as conntrack cleanup, which must follow the rules it cleans up after).
	Observers []SyncObserver
}

// SyncObserver acts on the state a mode has just programmed. AfterSync runs
// on the engine's sync goroutine, after the mode's Sync succeeded and before
// waiters learn of it; it gets the snapshot now in force and the changes the
// mode applied (merged over failed syncs), which it must not modify. It
// handles its own failures: the sync has already succeeded.
type SyncObserver interface {
	AfterSync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet)
}

// Engine runs mode syncs. Create it with New, wire the map's change
// callback to Notify, and call Run.
type Engine struct {
	smap      ServiceMap
	mode      mode.Mode
	metrics   *metrics.Metrics
	health    *healthz.Health
	clock     clock.Clock
	runner    *runner.Runner
	svcHealth interface {
		Sync(*servicemap.Snapshot) error
	}
	observers []SyncObserver

	fullSyncPeriod time.Duration

	// Owned by the sync function, which the runner never runs concurrently.
	failed *servicemap.ChangeSet // changes of a failed sync, to merge into the next
	// backlogged merges the changes of the syncs that left a backlog, for
	// the observers to see again once it is written.
	backlogged *servicemap.ChangeSet
	sawNode    bool      // a Node object was seen in some snapshot
	modeSeen   bool      // the mode has had one successful sync
	lastFull   time.Time // end of the last successful full sync

	mu       sync.Mutex
	lastGood *servicemap.Snapshot
	// synced is closed and replaced after every sync that advanced lastGood.
	synced chan struct{}
}

// New validates cfg and returns an Engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Map == nil || cfg.Mode == nil || cfg.Metrics == nil || cfg.Health == nil {
		return nil, errors.New("engine: Map, Mode, Metrics and Health are required")
	}
	switch {
	case cfg.MinSyncPeriod == 0:
		cfg.MinSyncPeriod = DefaultMinSyncPeriod
	case cfg.MinSyncPeriod < 0:
		cfg.MinSyncPeriod = 0
	}
	cfg.SyncPeriod = cmp.Or(cfg.SyncPeriod, DefaultSyncPeriod)
	cfg.FullSyncPeriod = cmp.Or(cfg.FullSyncPeriod, DefaultFullSyncPeriod)
	cfg.Burst = cmp.Or(cfg.Burst, DefaultBurst)
	cfg.RetryInterval = cmp.Or(cfg.RetryInterval, cfg.SyncPeriod)
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	e := &Engine{
		smap:    cfg.Map,
		mode:    cfg.Mode,
		metrics: cfg.Metrics,
		health:  cfg.Health,
		clock:   cfg.Clock,
		synced:  make(chan struct{}),

		fullSyncPeriod: cfg.FullSyncPeriod,
		svcHealth:      cfg.ServiceHealth,
		observers:      cfg.Observers,
	}
	r, err := runner.New(runner.Config{
		Name:          "sync-" + string(cfg.Mode.Name()),
		MinInterval:   cfg.MinSyncPeriod,
		MaxInterval:   cfg.SyncPeriod,
		Burst:         cfg.Burst,
		RetryInterval: cfg.RetryInterval,
		Clock:         cfg.Clock,
	}, e.sync)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e.runner = r
	return e, nil
}

// Notify says the service map may have changed. It never blocks; it is meant
// as the Tracker's onChange callback. Because the Tracker and the Engine need
// each other, the callback is usually a closure over a variable assigned
// after the Tracker is made; a call on that still-nil Engine does nothing
// (the Tracker keeps the change, and OnSynced notifies again).
func (e *Engine) Notify() {
	if e == nil {
		return
	}
	e.health.QueuedUpdate()
	e.metrics.LastQueuedTimestamp.Set(unixSeconds(e.clock.Now()))
	e.setPending()
	if !e.smap.Synced() {
		// A run now would do nothing yet spend one of the runner's burst
		// tokens, delaying the first real sync by up to the minimum sync
		// period; the map's OnSynced notification starts the first one.
		return
	}
	e.runner.Run()
}

// Run syncs whenever needed until ctx is done.
func (e *Engine) Run(ctx context.Context) {
	e.runner.Loop(ctx)
}

// WaitForGeneration blocks until a successful sync covered snapshot
// generation n or later, or ctx is done.
func (e *Engine) WaitForGeneration(ctx context.Context, n uint64) error {
	for {
		e.mu.Lock()
		if e.lastGood != nil && e.lastGood.Generation >= n {
			e.mu.Unlock()
			return nil
		}
		ch := e.synced
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for a sync of generation %d: %w", n, ctx.Err())
		}
	}
}

// InForce returns the snapshot the mode last fully programmed (nil before
// the first sync). It is immutable and taken under a lock held only for
// the pointer copy, so readers such as /services never delay a sync.
func (e *Engine) InForce() *servicemap.Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastGood
}

// sync is the runner's function: one attempt to bring the mode up to date.
func (e *Engine) sync(ctx context.Context, reason runner.Reason) error {
	if !e.smap.Synced() {
		// Syncing a partial view would drop services that are merely not
		// loaded yet; the map's OnSynced notification brings us back.
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("mode", e.mode.Name())

	snap, changes := e.smap.Snapshot()
	if snap == nil {
		return errors.New("service map returned no snapshot")
	}
	if changes == nil {
		changes = &servicemap.ChangeSet{}
	}
	e.setPending()
	e.health.SetNodeEligible(e.nodeEligible(snap))

	if e.failed != nil {
		e.failed.Merge(changes)
		changes, e.failed = e.failed, nil
	}
	periodic := reason == runner.Periodic
	changes.Periodic = periodic
	if !e.modeSeen || (periodic && e.clock.Now().Sub(e.lastFull) >= e.fullSyncPeriod) {
		changes.Full = true
	}
	backlogged := false
	if b, ok := e.mode.(mode.Backlogger); ok {
		backlogged = b.Backlog() > 0
	}
	if changes.Empty() && !periodic && !backlogged {
		// Nothing the mode must act on (events that changed nothing): the
		// mode's state already matches this snapshot.
		e.metrics.ServiceChangesTotal.Add(float64(changes.ServiceChanges))
		e.metrics.EndpointChangesTotal.Add(float64(changes.EndpointChanges))
		e.health.Updated()
		e.advance(snap)
		logger.V(4).Info("Nothing to sync", "generation", snap.Generation, "reason", reason)
		return nil
	}

	start := e.clock.Now()
	err := e.mode.Sync(ctx, snap, changes)
	end := e.clock.Now()
	if e.svcHealth != nil {
		if herr := e.svcHealth.Sync(snap); herr != nil {
			logger.Error(herr, "Some health-check node ports cannot be served")
		}
	}
	e.metrics.SyncDuration.Observe(end.Sub(start).Seconds())
	if err != nil {
		e.failed = changes
		e.metrics.SyncFailuresTotal.Inc()
		logger.Error(err, "Syncing proxy rules failed; will retry with the changes merged",
			"generation", snap.Generation, "reason", reason, "full", changes.Full, "changedPorts", len(changes.Changed))
		return fmt.Errorf("%s sync of generation %d: %w", e.mode.Name(), snap.Generation, err)
	}

	e.modeSeen = true
	if changes.Full {
		e.lastFull = end
	}
	for _, o := range e.observers {
		o.AfterSync(ctx, snap, changes)
	}
	e.health.Updated()
	e.recordSuccess(snap, changes, end)
	backlog := 0
	if b, ok := e.mode.(mode.Backlogger); ok {
		backlog = b.Backlog()
	}
	if backlog > 0 {
		// The rest of a large change: the next sync writes more of it,
		// after whatever changed meanwhile.
		e.keepBacklogged(changes)
		e.runner.Run()
	} else {
		if e.backlogged != nil {
			// The observers saw these changes when only part of them was
			// written (conntrack cleanup for a new UDP service would have
			// come before its rules); now all of it is in.
			for _, o := range e.observers {
				o.AfterSync(ctx, snap, e.backlogged)
			}
			e.backlogged = nil
		}
		e.advance(snap)
	}
	logger.V(2).Info("Synced proxy rules", "generation", snap.Generation, "reason", reason, "full", changes.Full,
		"changedPorts", len(changes.Changed), "servicePorts", snap.Len(), "backlog", backlog, "duration", end.Sub(start))
	return nil
}

// nodeEligible is false, as kube-proxy's, while this node's Node object is
// being deleted or has the cluster autoscaler's ToBeDeletedByClusterAutoscaler
// taint, or, having been seen, is gone. A node never seen (a services file
// with no Node) stays eligible.
func (e *Engine) nodeEligible(snap *servicemap.Snapshot) bool {
	if snap.Node == nil {
		return !e.sawNode
	}
	e.sawNode = true
	return !snap.Node.Deleting && !snap.Node.ToBeDeleted
}

func (e *Engine) setPending() {
	svc, eps := e.smap.Pending()
	e.metrics.ServiceChangesPending.Set(float64(svc))
	e.metrics.EndpointChangesPending.Set(float64(eps))
}

func (e *Engine) recordSuccess(snap *servicemap.Snapshot, changes *servicemap.ChangeSet, end time.Time) {
	m := e.metrics
	m.SyncLastTimestamp.Set(unixSeconds(end))
	m.ServiceChangesTotal.Add(float64(changes.ServiceChanges))
	m.EndpointChangesTotal.Add(float64(changes.EndpointChanges))
	for _, t := range changes.TriggerTimes {
		// A trigger time ahead of our clock (skew with the control plane)
		// says nothing useful about latency.
		if !t.IsZero() && !t.After(end) {
			m.NetworkProgrammingDuration.Observe(end.Sub(t).Seconds())
		}
	}
	if !changes.FirstEvent.IsZero() && !changes.FirstEvent.After(end) {
		m.EventToSyncDuration.Observe(end.Sub(changes.FirstEvent).Seconds())
	}
	endpoints := 0
	for _, p := range snap.All() {
		endpoints += len(p.Endpoints)
	}
	m.ServicePorts.Set(float64(snap.Len()))
	m.Endpoints.Set(float64(endpoints))
}

// advance records snap as the state the mode is in and wakes waiters.
// keepBacklogged merges changes into those the observers see again once
// the mode's backlog is written.
func (e *Engine) keepBacklogged(changes *servicemap.ChangeSet) {
	if e.backlogged == nil {
		e.backlogged = &servicemap.ChangeSet{}
	}
	e.backlogged.Merge(changes)
}

func (e *Engine) advance(snap *servicemap.Snapshot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lastGood = snap
	close(e.synced)
	e.synced = make(chan struct{})
}

// unixSeconds keeps whole seconds and the fraction apart so the gauge value
// loses no more precision than a float64 must.
func unixSeconds(t time.Time) float64 { return float64(t.Unix()) + float64(t.Nanosecond())/1e9 }
