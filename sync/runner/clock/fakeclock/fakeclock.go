// Package fakeclock is a manually advanced clock.Clock for deterministic tests.
package fakeclock

import (
	"sync"
	"time"

	"kproxy.dev/kproxy/sync/runner/clock"
)

// Clock only moves when Step or Set is called; timers fire during those calls.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

var _ clock.Clock = (*Clock)(nil)

// New returns a clock reading start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once the clock reaches now+d; a timer
// for d <= 0 has already fired.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{clock: c, deadline: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

// Step advances the clock by d, firing every timer that comes due.
func (c *Clock) Step(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t (never backwards), firing every timer that comes due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	var kept []*timer
	for _, tm := range c.timers {
		if tm.deadline.After(c.now) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- c.now // the channel is buffered and each timer fires once
	}
	c.timers = kept
}

// Waiters is the number of timers that have neither fired nor been stopped.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type timer struct {
	clock    *Clock
	deadline time.Time
	ch       chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, tm := range c.timers {
		if tm == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}
