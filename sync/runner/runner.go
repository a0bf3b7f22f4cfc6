// Package runner runs a function on request, but never more often than a
// minimum interval (with a burst allowance), at least every maximum interval,
// and again after a retry interval when it fails. Any number of requests that
// arrive while a run is waiting or in progress coalesce into one run.
package runner

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Reason says why a run happened; the Runner passes it to its function.
type Reason int

const (
	// Requested runs follow a Run call.
	Requested Reason = iota
	// Retry runs follow a failed run or a RetryAfter call.
	Retry
	// Periodic runs happen when maxInterval passed without any run.
	Periodic
)

func (r Reason) String() string {
	switch r {
	case Requested:
		return "requested"
	case Retry:
		return "retry"
	case Periodic:
		return "periodic"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Config configures a Runner.
type Config struct {
	// Name appears in logs.
	Name string
	// MinInterval is the least time between runs once the burst is spent;
	// 0 means no limit.
	MinInterval time.Duration
	// MaxInterval is the most time between the end of a run and the start of
	// the next; 0 disables periodic runs.
	MaxInterval time.Duration
	// Burst is how many runs may happen back to back (at least 1).
	Burst int
	// RetryInterval is how long after a failed run it is retried; it is also
	// bounded by MinInterval. 0 means MinInterval, or one second if that is 0.
	RetryInterval time.Duration
	// Clock defaults to the wall clock.
	Clock clock.Clock
}

// Func is the function a Runner runs.
type Func func(ctx context.Context, reason Reason) error

// Runner is a bounded-frequency runner. Create it with New and drive it with
// Loop; Run and RetryAfter may be called from any goroutine.
type Runner struct {
	name  string
	fn    Func
	clock clock.Clock
	wake  chan struct{}

	mu    sync.Mutex
	sched *schedule

	// onIdle, when set (by tests), is called each time Loop has armed its
	// timer and is about to wait; due is zero when nothing is scheduled.
	onIdle func(due time.Time, reason Reason)
}

// New returns a Runner for fn.
func New(cfg Config, fn Func) (*Runner, error) {
	if fn == nil {
		return nil, fmt.Errorf("runner %q: nil function", cfg.Name)
	}
	if cfg.MinInterval < 0 || cfg.MaxInterval < 0 || cfg.RetryInterval < 0 {
		return nil, fmt.Errorf("runner %q: negative interval (min %v, max %v, retry %v)",
			cfg.Name, cfg.MinInterval, cfg.MaxInterval, cfg.RetryInterval)
	}
	if cfg.MaxInterval > 0 && cfg.MinInterval > cfg.MaxInterval {
		return nil, fmt.Errorf("runner %q: min interval %v exceeds max interval %v",
			cfg.Name, cfg.MinInterval, cfg.MaxInterval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = cfg.MinInterval
		cfg.RetryInterval = cmp.Or(cfg.RetryInterval, time.Second)
	}
	return &Runner{
		name:  cfg.Name,
		fn:    fn,
		clock: cfg.Clock,
		wake:  make(chan struct{}, 1),
		sched: newSchedule(cfg.Clock.Now(), cfg.MinInterval, cfg.MaxInterval, cfg.RetryInterval, cfg.Burst),
	}, nil
}

// Run asks for a run as soon as the rate limit allows. It never blocks.
func (r *Runner) Run() {
	r.mu.Lock()
	r.sched.request()
	r.mu.Unlock()
	r.poke()
}

// RetryAfter asks for a run no sooner than d from now (and no sooner than
// the rate limit allows), unless one is already due earlier.
func (r *Runner) RetryAfter(d time.Duration) {
	r.mu.Lock()
	r.sched.retryAfter(r.clock.Now(), d)
	r.mu.Unlock()
	r.poke()
}

func (r *Runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default: // a wake-up is already pending; the loop will see our state
	}
}

// Loop runs the function whenever it is due, until ctx is done. Only one Loop
// may run per Runner.
func (r *Runner) Loop(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("runner", r.name)
	for {
		// Wake-ups sent before this point are covered by the state read below.
		select {
		case <-r.wake:
		default:
		}
		r.mu.Lock()
		now := r.clock.Now()
		due, reason, ok := r.sched.next(now)
		r.mu.Unlock()

		var timer clock.Timer
		var fire <-chan time.Time
		switch {
		case ok && due.After(now):
			timer = r.clock.NewTimer(due.Sub(now))
			fire = timer.C()
		case ok:
			// Already due: no timer, as a fake clock's timer for d <= 0 only
			// fires at its next step.
			ready := make(chan time.Time, 1)
			ready <- now
			fire = ready
		}
		if r.onIdle != nil {
			if !ok {
				due = time.Time{}
			}
			r.onIdle(due, reason)
		}

		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-r.wake:
			// State changed; recompute the deadline.
			if timer != nil {
				timer.Stop()
			}
			continue
		case <-fire:
		}
		r.runOnce(ctx, logger)
	}
}

// runOnce runs the function if it is still due (a concurrent RetryAfter or
// Run can only make it due sooner, never later, so it normally is).
func (r *Runner) runOnce(ctx context.Context, logger klog.Logger) {
	r.mu.Lock()
	now := r.clock.Now()
	due, reason, ok := r.sched.next(now)
	if !ok || due.After(now) {
		r.mu.Unlock()
		return
	}
	r.sched.started(now)
	r.mu.Unlock()

	err := r.fn(ctx, reason)

	r.mu.Lock()
	r.sched.finished(r.clock.Now(), err != nil && ctx.Err() == nil)
	r.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		logger.V(2).Info("Run failed; will retry", "reason", reason, "err", err)
	}
}
