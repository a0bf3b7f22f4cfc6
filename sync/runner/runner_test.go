package runner

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// harness drives a Runner's Loop with a fake clock. The loop reports every
// time it goes idle, so the test knows exactly when it is waiting and for
// what, and never has to sleep.
type harness struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	r     *Runner
	idle  chan time.Time
	due   time.Time
	done  chan struct{}
	stop  context.CancelFunc
	mu    sync.Mutex
	runs  []Reason
	fails int // how many of the next runs fail
	// requestsDuringRun is how many times the next run calls Run itself.
	requestsDuringRun int
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, clk: clocktesting.NewFakeClock(t0), idle: make(chan time.Time), done: make(chan struct{})}
	cfg.Clock = h.clk
	r, err := New(cfg, h.fn)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.onIdle = func(due time.Time, _ Reason) { h.idle <- due }
	h.r = r
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() {
		defer close(h.done)
		r.Loop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		// Keep answering idle reports until the loop has returned.
		for {
			select {
			case <-h.done:
				return
			case <-h.idle:
			}
		}
	})
	h.waitIdle()
	return h
}

func (h *harness) fn(ctx context.Context, reason Reason) error {
	h.mu.Lock()
	h.runs = append(h.runs, reason)
	n := h.requestsDuringRun
	h.requestsDuringRun = 0
	fail := h.fails > 0
	if fail {
		h.fails--
	}
	h.mu.Unlock()
	for range n {
		h.r.Run()
	}
	if fail {
		return errors.New("injected failure")
	}
	return nil
}

func (h *harness) waitIdle() {
	h.t.Helper()
	select {
	case h.due = <-h.idle:
	case <-time.After(10 * time.Second): // deadlock guard, not a timing assertion
		h.t.Fatal("runner loop never went idle")
	}
}

// settle waits until the loop is idle with nothing due right now.
func (h *harness) settle() {
	h.t.Helper()
	h.waitIdle()
	for !h.due.IsZero() && !h.due.After(h.clk.Now()) {
		h.waitIdle()
	}
}

// takeRuns returns the reasons of the runs since the last call.
func (h *harness) takeRuns() []Reason {
	h.mu.Lock()
	defer h.mu.Unlock()
	runs := h.runs
	h.runs = nil
	return runs
}

type step struct {
	// Exactly one action per step.
	run     int           // call Run this many times
	advance time.Duration // step the fake clock
	fail    int           // make the next runs fail (no action on the loop)
	during  int           // the next run calls Run this many times

	wantRuns []Reason      // runs that happened during this step
	wantDue  time.Duration // when the loop next wakes, from t0 (-1: nothing scheduled)
}

func TestLoop(t *testing.T) {
	const never = -1
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "requests coalesce into one run and later ones wait for minInterval",
			cfg:  Config{MinInterval: time.Second},
			steps: []step{
				{run: 5, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 3, wantRuns: nil, wantDue: time.Second},
				{advance: time.Second, wantRuns: []Reason{Requested}, wantDue: never},
			},
		},
		{
			name: "min interval respected",
			cfg:  Config{MinInterval: 2 * time.Second, MaxInterval: time.Minute},
			steps: []step{
				{run: 1, wantRuns: []Reason{Requested}, wantDue: time.Minute},
				{advance: 500 * time.Millisecond, wantDue: time.Minute},
				{run: 1, wantDue: 2 * time.Second},
				{advance: 1499 * time.Millisecond, wantDue: 2 * time.Second},
				{advance: time.Millisecond, wantRuns: []Reason{Requested}, wantDue: 2*time.Second + time.Minute},
			},
		},
		{
			name: "max interval runs periodically with no requests",
			cfg:  Config{MinInterval: time.Second, MaxInterval: 10 * time.Second},
			steps: []step{
				{advance: 9 * time.Second, wantDue: 10 * time.Second},
				{advance: time.Second, wantRuns: []Reason{Periodic}, wantDue: 20 * time.Second},
				{advance: 3 * time.Second, wantDue: 20 * time.Second},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: 23 * time.Second},
				{advance: 10 * time.Second, wantRuns: []Reason{Periodic}, wantDue: 33 * time.Second},
			},
		},
		{
			name: "burst allows quick runs then refills at one per minInterval",
			cfg:  Config{MinInterval: time.Second, Burst: 3},
			steps: []step{
				{run: 1, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 1, wantDue: time.Second},
				{advance: time.Second, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 1, wantDue: 2 * time.Second},
				// The clock jumps to 6s, so the waiting run happens then, with
				// the bucket full again: it leaves two tokens for quick runs.
				{advance: 5 * time.Second, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 1, wantDue: 7 * time.Second},
			},
		},
		{
			name: "failure is retried after the retry interval",
			cfg:  Config{MinInterval: time.Second, MaxInterval: time.Minute, RetryInterval: 5 * time.Second},
			steps: []step{
				{fail: 2},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: 5 * time.Second},
				{advance: 5 * time.Second, wantRuns: []Reason{Retry}, wantDue: 10 * time.Second},
				{advance: 5 * time.Second, wantRuns: []Reason{Retry}, wantDue: 10*time.Second + time.Minute},
			},
		},
		{
			name: "retry is bounded by minInterval",
			cfg:  Config{MinInterval: 3 * time.Second, RetryInterval: 100 * time.Millisecond},
			steps: []step{
				{fail: 1},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: 3 * time.Second},
				{advance: 3 * time.Second, wantRuns: []Reason{Retry}, wantDue: never},
			},
		},
		{
			name: "a request during a retry wait runs once the rate limit allows and cancels the retry",
			cfg:  Config{MinInterval: time.Second, RetryInterval: 10 * time.Second},
			steps: []step{
				{fail: 1},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: 10 * time.Second},
				{run: 1, wantDue: time.Second},
				{advance: time.Second, wantRuns: []Reason{Requested}, wantDue: never},
			},
		},
		{
			name: "requests made while running coalesce into one more run",
			cfg:  Config{MinInterval: time.Second},
			steps: []step{
				{during: 4},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: time.Second},
				{advance: time.Second, wantRuns: []Reason{Requested}, wantDue: never},
			},
		},
		{
			name: "no min interval runs every request at once",
			cfg:  Config{},
			steps: []step{
				{run: 1, wantRuns: []Reason{Requested}, wantDue: never},
				{run: 1, wantRuns: []Reason{Requested}, wantDue: never},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.cfg)
			for i, s := range tt.steps {
				switch {
				case s.fail > 0:
					h.mu.Lock()
					h.fails = s.fail
					h.mu.Unlock()
					continue
				case s.during > 0:
					h.mu.Lock()
					h.requestsDuringRun = s.during
					h.mu.Unlock()
					continue
				case s.run > 0:
					for range s.run {
						h.r.Run()
					}
					h.settle()
				case s.advance > 0:
					wakes := !h.due.IsZero() && !h.due.After(h.clk.Now().Add(s.advance))
					h.clk.Step(s.advance)
					if wakes {
						h.settle()
					}
				}
				if got := h.takeRuns(); !slices.Equal(got, s.wantRuns) {
					t.Errorf("step %d: runs = %v, want %v", i, got, s.wantRuns)
				}
				wantDue := time.Time{}
				if s.wantDue != never {
					wantDue = t0.Add(s.wantDue)
				}
				if !h.due.Equal(wantDue) {
					t.Errorf("step %d: next wake-up at %v, want %v", i, h.due.Sub(t0), s.wantDue)
				}
			}
		})
	}
}

func TestLoopStopsOnContextDone(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r, err := New(Config{MinInterval: time.Second, MaxInterval: time.Minute, Clock: clk}, func(context.Context, Reason) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		r.Loop(ctx)
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // deadlock guard
		t.Fatal("Loop did not return after its context was cancelled")
	}
	if n := clk.Waiters(); n != 0 {
		t.Errorf("Loop left %d timers running", n)
	}
}

func TestRetryAfter(t *testing.T) {
	h := newHarness(t, Config{MinInterval: time.Second})
	h.r.RetryAfter(4 * time.Second)
	h.settle()
	if want := t0.Add(4 * time.Second); !h.due.Equal(want) {
		t.Fatalf("next wake-up %v, want %v", h.due.Sub(t0), want.Sub(t0))
	}
	// An earlier retry wins over a later one.
	h.r.RetryAfter(2 * time.Second)
	h.settle()
	h.r.RetryAfter(3 * time.Second)
	h.settle()
	if want := t0.Add(2 * time.Second); !h.due.Equal(want) {
		t.Fatalf("next wake-up %v, want %v", h.due.Sub(t0), want.Sub(t0))
	}
	h.clk.Step(2 * time.Second)
	h.settle()
	if got := h.takeRuns(); !slices.Equal(got, []Reason{Retry}) {
		t.Fatalf("runs = %v, want [retry]", got)
	}
	if !h.due.IsZero() {
		t.Fatalf("a retry is still scheduled at %v after it ran", h.due.Sub(t0))
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	ok := func(context.Context, Reason) error { return nil }
	tests := []struct {
		name string
		cfg  Config
		fn   Func
	}{
		{"nil function", Config{}, nil},
		{"negative min", Config{MinInterval: -1}, ok},
		{"min above max", Config{MinInterval: 2 * time.Second, MaxInterval: time.Second}, ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg, tt.fn); err == nil {
				t.Error("New accepted a bad config")
			}
		})
	}
}

func BenchmarkRunCoalescing(b *testing.B) {
	r, err := New(Config{MinInterval: time.Hour}, func(context.Context, Reason) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Loop(ctx)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Run()
		}
	})
}
