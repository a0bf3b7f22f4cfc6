package tcprelay

import (
	"cmp"
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
)

const (
	// growAt: a loop is added (up to the maximum) when every running loop
	// has at least this many connections, or when a loop is saturated
	// (saturation.go). Loops that are not busy only take turns on the
	// netpoller's thread, so connections share one loop until then.
	growAt = 64
	// handOverSlack is how many more connections than the least loaded
	// loop the accepting loop may have and still keep a new one: handing
	// over costs the other loop a wake-up, so a small imbalance is left.
	handOverSlack = 1
)

// startLoops starts the first loop and, for a *net.TCPListener, the
// descriptor of the listener the loops watch.
func (p *Proxy) startLoops() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isClosed() {
		return net.ErrClosed
	}
	p.maxLoops = p.cfg.Loops
	p.maxLoops = cmp.Or(p.maxLoops, runtime.GOMAXPROCS(0))
	if tl, ok := p.ln.(*net.TCPListener); ok {
		fd, err := dupListener(tl)
		if err != nil {
			return err
		}
		p.listenFD, p.raw = fd, true
	}
	p.loopSet = make([]*loop, p.maxLoops)
	if err := p.addLoopLocked(); err != nil {
		if p.raw {
			unix.Close(p.listenFD)
			p.listenFD, p.raw = -1, false
		}
		return err
	}
	return nil
}

// addLoopLocked starts one more loop. p.mu must be held.
func (p *Proxy) addLoopLocked() error {
	n := int(p.nloops.Load())
	listenFD := -1
	if p.raw {
		listenFD = p.listenFD
	}
	l, err := newLoop(p, listenFD)
	if err != nil {
		return err
	}
	if p.raw {
		p.listenRefs++
	}
	p.loopSet[n] = l
	p.running.Add(1)
	p.nloops.Store(int32(n + 1)) // publishes loopSet[n]
	go l.run()
	return nil
}

// loops returns the running loops.
func (p *Proxy) loops() []*loop { return p.loopSet[:p.nloops.Load()] }

// maybeGrow adds a loop when every running loop has growAt connections or
// more and the maximum is not reached. It is called for every accepted
// connection, so the common case is a few atomic loads.
func (p *Proxy) maybeGrow() {
	if int(p.nloops.Load()) >= p.maxLoops {
		return
	}
	for _, l := range p.loops() {
		if l.load.Load() < growAt {
			return
		}
	}
	var err error
	p.mu.Lock()
	if !p.isClosed() && int(p.nloops.Load()) < p.maxLoops && (!p.raw || p.listenFD >= 0) {
		err = p.addLoopLocked()
	}
	p.mu.Unlock()
	if err != nil {
		// The running loops carry on; a later connection tries again.
		p.logErrorLimited(err, "Cannot start another event loop")
	}
}

// leastLoaded returns the loop a new connection accepted by self (nil: not
// by a loop) should go to: self unless another loop has fewer connections
// by more than handOverSlack. Every loop accepts when it wakes, so without
// this a burst of connections can land on one loop, that is one core. A
// saturated loop gets none while another loop is not.
func (p *Proxy) leastLoaded(self *loop) *loop {
	best, bestLoad := self, int32(1<<30)
	if self != nil && !self.saturated.Load() {
		bestLoad = self.load.Load() - handOverSlack
	}
	var fallback *loop // the least loaded of all, when every loop is saturated
	for _, l := range p.loops() {
		n := l.load.Load()
		if fallback == nil || n < fallback.load.Load() {
			fallback = l
		}
		if l != self && !l.saturated.Load() && n < bestLoad {
			best, bestLoad = l, n
		}
	}
	if best == nil || (best == self && self.saturated.Load() && fallback != nil) {
		return fallback
	}
	return best
}

// postAll posts f to every running loop.
func (p *Proxy) postAll(f func(*loop)) {
	for _, l := range p.loops() {
		l.post(f)
	}
}

// listenerReleased is called by each loop that stops watching the listener.
func (p *Proxy) listenerReleased() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listenRefs--; p.listenRefs == 0 {
		unix.Close(p.listenFD)
		p.listenFD = -1
	}
}

func (p *Proxy) loopDone() { p.running.Done() }

// dupListener returns a non-blocking descriptor of the listening socket for
// the loops.
func dupListener(tl *net.TCPListener) (int, error) {
	fd, err := eventloop.Dup(tl)
	if err != nil {
		return -1, fmt.Errorf("listener: %w", err)
	}
	return fd, nil
}

// optionsOnListener sets the relay's socket options on the listening
// socket, so that the sockets it accepts inherit them.
func optionsOnListener(tl *net.TCPListener) error {
	rc, err := tl.SyscallConn()
	if err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	var setErr error
	if err := rc.Control(func(fd uintptr) { setErr = setListenerOptions(int(fd)) }); err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	if setErr != nil {
		return fmt.Errorf("listener: %w", setErr)
	}
	return nil
}
