package tcprelay

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// wait returns the number of ready events, parking on the netpoller until
// there are some, a timer is due or something is posted (then it may return
// 0). With work already queued it only polls.
func (l *loop) wait() (int, error) {
	if err := l.armTimer(); err != nil {
		return 0, err
	}
	l.ready, l.waitErr = 0, nil
	// parked before posted: with post's stores in the opposite order, a
	// post either is seen here or sees parked and wakes the loop.
	l.parked.Store(true)
	defer l.parked.Store(false)
	if len(l.later) > 0 || l.posted.Load() {
		l.pollEvents(uintptr(l.epfd))
		return l.ready, l.waitErr
	}
	if err := l.rc.Read(l.waitFn); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			l.expired = true
			return 0, nil
		}
		return 0, err
	}
	return l.ready, l.waitErr
}

// pollEvents collects ready events without blocking; returning false parks
// the goroutine until the epoll set becomes readable.
func (l *loop) pollEvents(fd uintptr) bool {
	n, err := rawPoll(int(fd), l.events)
	l.ready, l.waitErr = n, err
	return n > 0 || err != nil
}

// armTimer sets the file's read deadline to the earliest timer when that is
// sooner than the deadline set, or when the last one fired. A deadline that
// fires early (its dial completed meanwhile) only costs a turn that re-arms.
func (l *loop) armTimer() error {
	want := l.nextTimer()
	if !l.expired && (want.IsZero() || (!l.armed.IsZero() && !want.Before(l.armed))) {
		return nil
	}
	if err := l.file.SetReadDeadline(want); err != nil {
		return fmt.Errorf("setting the loop's timer: %w", err)
	}
	l.armed, l.expired = want, false
	return nil
}

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
