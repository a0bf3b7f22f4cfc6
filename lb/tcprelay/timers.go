package tcprelay

import "time"

// nextTimer is when the loop must wake for its timers (zero: none): the
// first dial deadline or the end of an accept back-off.
func (l *loop) nextTimer() time.Time {
	t := l.resumeAt
	if h := l.dials.head; h != nil && (t.IsZero() || h.deadline.Before(t)) {
		t = h.deadline
	}
	return t
}

func (l *loop) runTimers(now time.Time) {
	l.expireDials(now)
	if !l.resumeAt.IsZero() && !now.Before(l.resumeAt) {
		l.resumeAccepting()
	}
}
