package fakeclock

import (
	"testing"
	"time"
)

func fired(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestTimers(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		after     time.Duration
		step      time.Duration
		stop      bool
		wantFired bool
		wantStop  bool // Stop's result when stop is set
	}{
		{"not yet due", 2 * time.Second, time.Second, false, false, false},
		{"exactly due", 2 * time.Second, 2 * time.Second, false, true, false},
		{"past due", time.Second, time.Hour, false, true, false},
		{"zero duration fires at once", 0, 0, false, true, false},
		{"stopped before due never fires", time.Second, 0, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(start)
			tm := c.NewTimer(tt.after)
			if tt.stop {
				if got := tm.Stop(); got != tt.wantStop {
					t.Errorf("Stop() = %v, want %v", got, tt.wantStop)
				}
				tt.step = time.Hour
			}
			c.Step(tt.step)
			if got := fired(tm.C()); got != tt.wantFired {
				t.Errorf("fired = %v, want %v", got, tt.wantFired)
			}
			if !c.Now().Equal(start.Add(tt.step)) {
				t.Errorf("Now() = %v, want %v", c.Now(), start.Add(tt.step))
			}
			wantWaiters := 0
			if !tt.wantFired && !tt.stop {
				wantWaiters = 1
			}
			if got := c.Waiters(); got != wantWaiters {
				t.Errorf("Waiters() = %d, want %d", got, wantWaiters)
			}
		})
	}
}

func TestSetNeverGoesBackwards(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(start)
	c.Set(start.Add(-time.Hour))
	if !c.Now().Equal(start) {
		t.Errorf("Now() = %v after setting the past, want %v", c.Now(), start)
	}
}
