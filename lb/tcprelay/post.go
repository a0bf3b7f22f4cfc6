package tcprelay

import "kproxy.dev/kproxy/lb/eventloop"

// post hands work to the loop from another goroutine and wakes it. It
// returns false if the loop has exited.
func (l *loop) post(f func(l *loop)) bool {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return false
	}
	f(l)
	l.mu.Unlock()
	l.poll.Wake()
	return true
}

// handOver gives a freshly accepted connection to l from another
// goroutine.
func (l *loop) handOver(a adopted) {
	l.load.Add(1)
	if !l.post(func(l *loop) { l.inbox = append(l.inbox, a) }) {
		l.load.Add(-1)
		eventloop.CloseWithReset(a.fd)
	}
}

// takePosted serves what other goroutines posted (the poller was woken).
func (l *loop) takePosted() {
	l.mu.Lock()
	inbox, migrants, detach, abort, resetPorts := l.inbox, l.migrants, l.detach, l.abort, l.resetPorts
	l.inbox, l.migrants, l.abort, l.resetPorts = nil, nil, false, nil
	l.mu.Unlock()
	for _, port := range resetPorts {
		l.resetPort(port)
	}
	for _, c := range migrants {
		l.load.Add(-1) // adopt counts it again
		l.adopt(c)
	}
	for _, a := range inbox {
		l.load.Add(-1) // admit counts it again if it stays
		if abort || l.p.forced.Load() {
			eventloop.CloseWithReset(a.fd)
			continue
		}
		l.admit(a.fd, a.peer)
	}
	if abort {
		l.abortAll()
	}
	if detach {
		l.stopAccepting()
	}
}

// exit closes the epoll set; posts from now on are refused.
func (l *loop) exit() {
	l.releaseBuffer()
	l.mu.Lock()
	l.dead = true
	inbox, migrants := l.inbox, l.migrants
	l.inbox, l.migrants = nil, nil
	l.mu.Unlock()
	for _, a := range inbox {
		l.load.Add(-1)
		eventloop.CloseWithReset(a.fd)
	}
	for _, c := range migrants {
		l.dropMigrant(c)
	}
	l.poll.Close()
	l.p.loopDone()
}
