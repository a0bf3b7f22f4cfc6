package tcprelay

import (
	"errors"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
)

// errPipeEmpty guards against a splice out of a pipe that holds nothing,
// which the bookkeeping rules out; it must never make the loop spin.
var errPipeEmpty = errors.New("splice pipe unexpectedly empty")

// pumpSpliced moves direction d through a pipe with splice(2): socket to
// pipe, pipe to socket, the bytes never copied through user space. The
// pipe is held only while it holds bytes. A short splice into the pipe does
// not show the socket drained (the pipe may have run out of slots), so the
// direction reads until EAGAIN. It returns false when it aborted c.
func (l *loop) pumpSpliced(c *conn, d direction) bool {
	src, dst := c.ends(d)
	for budget := turnBudget; src.readable; {
		if dst.pipe == nil {
			p, err := l.p.pools.getPipe()
			if err != nil {
				// Out of descriptors for a pipe: copy through the buffer.
				l.p.log.V(2).Info("No splice pipe; relaying with read/write", "err", err)
				c.spliced[d] = false
				l.serveLater(c)
				return true
			}
			dst.pipe = p
		}
		n, err := spliceFD(src.fd, dst.pipe.w, dst.pipe.size)
		switch {
		case err == unix.EAGAIN:
			src.readable = false
			l.putEmptyPipe(dst)
			return true
		case err != nil:
			l.abortReading(c, d)
			return false
		case n == 0:
			src.eof, src.readable = true, false
			l.putEmptyPipe(dst)
			passEOF(c, d)
			return true
		}
		dst.inPipe = n
		c.moved[d] += int64(n)
		if !l.flushPipe(c, d) {
			return false
		}
		if dst.inPipe > 0 {
			return true // wait for EPOLLOUT on dst
		}
		if budget -= n; budget <= 0 {
			l.serveLater(c)
			return true
		}
	}
	l.putEmptyPipe(dst)
	return true
}

// flushPipe splices the pipe's content to d's destination until it is
// empty or the destination's send buffer is full. It returns false when it
// aborted c.
func (l *loop) flushPipe(c *conn, d direction) bool {
	_, dst := c.ends(d)
	for dst.inPipe > 0 {
		n, err := spliceFD(dst.pipe.r, dst.fd, dst.inPipe)
		if err == unix.EAGAIN {
			dst.writable = false
			return true
		}
		if err == nil && n == 0 {
			err = errPipeEmpty
		}
		if err != nil {
			l.abortWriting(c, d)
			return false
		}
		dst.inPipe -= n
		c.count(d, n)
	}
	return true
}

// putEmptyPipe returns dst's pipe to the pool if it holds nothing, so an
// idle connection holds no pipe.
func (l *loop) putEmptyPipe(dst *side) {
	if dst.pipe != nil && dst.inPipe == 0 {
		l.p.pools.putPipe(dst.pipe)
		dst.pipe = nil
	}
}

// spliceFD moves up to n bytes between descriptors without blocking.
func spliceFD(from, to, n int) (int, error) { return eventloop.Splice(from, to, n) }
