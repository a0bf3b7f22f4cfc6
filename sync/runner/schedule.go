package runner

import "time"

// schedule decides when the next run is due. It holds no clock and no
// goroutines, so its rules can be tested one step at a time.
type schedule struct {
	minInterval   time.Duration
	maxInterval   time.Duration
	retryInterval time.Duration
	burst         int

	// The token bucket (burst tokens, one back per minInterval) is kept as
	// the time it would be full again minus one token's worth, the "theoretical
	// arrival time" of the generic cell rate algorithm: exact in integer
	// durations, with no fractional tokens to round.
	tat time.Time

	requested bool
	retryAt   time.Time // zero when no retry is scheduled
	lastRun   time.Time // when the previous run finished (or the start)
}

func newSchedule(now time.Time, minInterval, maxInterval, retryInterval time.Duration, burst int) *schedule {
	if burst < 1 {
		burst = 1
	}
	return &schedule{
		minInterval:   minInterval,
		maxInterval:   maxInterval,
		retryInterval: retryInterval,
		burst:         burst,
		tat:           now,
		lastRun:       now,
	}
}

// tokenAt is the earliest time a token is available.
func (s *schedule) tokenAt(now time.Time) time.Time {
	at := s.tat.Add(-time.Duration(s.burst-1) * s.minInterval)
	if at.Before(now) {
		return now
	}
	return at
}

// next returns when the next run is due and why; ok is false when nothing is
// due at all (no request, no retry and no maxInterval).
func (s *schedule) next(now time.Time) (at time.Time, reason Reason, ok bool) {
	token := s.tokenAt(now)
	consider := func(want time.Time, r Reason) {
		if want.Before(token) {
			want = token
		}
		// Earlier wins; on a tie the first considered reason wins.
		if !ok || want.Before(at) {
			at, reason, ok = want, r, true
		}
	}
	if s.requested {
		consider(now, Requested)
	}
	if !s.retryAt.IsZero() {
		consider(s.retryAt, Retry)
	}
	if s.maxInterval > 0 {
		consider(s.lastRun.Add(s.maxInterval), Periodic)
	}
	return at, reason, ok
}

// request records a Run call; requests coalesce until the next run starts.
func (s *schedule) request() { s.requested = true }

// retryAfter asks for a run no sooner than d from now, unless an earlier
// retry is already scheduled.
func (s *schedule) retryAfter(now time.Time, d time.Duration) {
	at := now.Add(d)
	if s.retryAt.IsZero() || at.Before(s.retryAt) {
		s.retryAt = at
	}
}

// started takes a token and consumes every pending request and retry: the
// run about to happen covers them all.
func (s *schedule) started(now time.Time) {
	if s.tat.Before(now) {
		s.tat = now
	}
	s.tat = s.tat.Add(s.minInterval)
	s.requested = false
	s.retryAt = time.Time{}
}

// finished records the end of a run and schedules a retry if it failed.
func (s *schedule) finished(now time.Time, failed bool) {
	s.lastRun = now
	if failed {
		s.retryAfter(now, s.retryInterval)
	}
}
