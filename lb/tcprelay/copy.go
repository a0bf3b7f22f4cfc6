package tcprelay

import (
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
)

// turnBudget bounds the bytes one direction moves per loop turn, so a bulk
// flow shares its loop with the connections around it; a direction with
// more to move is served again at the end of the turn. 1 MiB is about 1 ms
// of a 10 Gbit/s stream; smaller budgets cost bulk throughput
// (bench/MEASUREMENTS.md).
const turnBudget = 1 << 20

// service moves whatever can move on c, both ways, and releases c once both
// directions have ended. The loop calls it for every event on c's sockets.
func (l *loop) service(c *conn) {
	if c.state != relaying {
		return
	}
	for _, d := range [2]direction{toEndpoint, toClient} {
		if !l.pump(c, d) {
			return // c was aborted
		}
	}
	if c.finished(toEndpoint) && c.finished(toClient) {
		l.release(c, false, false)
	}
}

// pump moves direction d as far as the sockets allow: first what waits for
// the destination, then fresh reads, written straight on. It returns false
// when it aborted c.
func (l *loop) pump(c *conn, d direction) bool {
	src, dst := c.ends(d)
	if dst.pending() {
		if !l.flush(c, d) {
			return false
		}
		if dst.pending() {
			return true // wait for EPOLLOUT on dst; src stays unread
		}
	}
	if src.eof {
		passEOF(c, d)
		return true
	}
	if c.spliced[d] {
		return l.pumpSpliced(c, d)
	}
	for budget := turnBudget; src.readable; {
		buf := l.buffer()
		n, err := readFD(src.fd, buf)
		switch {
		case err == unix.EAGAIN:
			src.readable = false
			return true
		case err != nil: // the source broke or reset: reset the destination
			l.abortReading(c, d)
			return false
		case n == 0:
			src.eof, src.readable = true, false
			passEOF(c, d)
			return true
		}
		// A short read drained the socket: with edge-triggered events, the
		// next byte to arrive raises a new one. See side.finSeen and
		// side.broken for the two exceptions.
		if n < len(buf) && !src.broken {
			src.readable = false
			src.eof = src.finSeen
		}
		w, err := writeFD(dst.fd, buf[:n])
		if err != nil { // the destination broke or reset: reset the source
			l.abortWriting(c, d)
			return false
		}
		c.count(d, w)
		c.moved[d] += int64(n)
		if w < n {
			l.stash(dst, buf[w:n])
			return true // an end of stream is passed on once dst drains
		}
		if src.eof {
			passEOF(c, d)
			return true
		}
		if n == len(buf) && l.spliceAfter >= 0 && c.moved[d] >= l.spliceAfter {
			c.spliced[d] = true
			return l.pumpSpliced(c, d)
		}
		if budget -= n; budget <= 0 && src.readable {
			l.serveLater(c)
			return true
		}
	}
	return true
}

// flush writes what waits for d's destination. It returns false when it
// aborted c.
func (l *loop) flush(c *conn, d direction) bool {
	_, dst := c.ends(d)
	if !dst.writable {
		return true
	}
	if len(dst.out) > 0 {
		w, err := writeFD(dst.fd, dst.out)
		if err != nil {
			l.abortWriting(c, d)
			return false
		}
		c.count(d, w)
		dst.out = dst.out[w:]
		if len(dst.out) > 0 {
			dst.writable = false
			return true
		}
		l.p.pools.putBuf(dst.outBuf)
		dst.out, dst.outBuf = nil, nil
	}
	if dst.inPipe > 0 {
		return l.flushPipe(c, d)
	}
	return true
}

// stash keeps what dst's send buffer did not take, in a buffer of its own
// (the loop's buffer serves the next read), until EPOLLOUT.
func (l *loop) stash(dst *side, rest []byte) {
	dst.outBuf = l.p.pools.getBuf()
	dst.out = (*dst.outBuf)[:copy(*dst.outBuf, rest)]
	dst.writable = false
}

// passEOF passes direction d's end of stream on: a FIN to the destination
// (shutdown SHUT_WR), once. When the other direction has already ended, c
// is about to be closed, and close(2) sends that FIN.
func passEOF(c *conn, d direction) {
	_, dst := c.ends(d)
	if dst.shut {
		return
	}
	dst.shut = true
	if c.finished(d.reverse()) {
		return
	}
	// An error means dst is already reset or gone; its own events say so.
	_ = eventloop.Shutdown(dst.fd, unix.SHUT_WR)
}

// count adds n bytes relayed to the direction's metric.
func (c *conn) count(d direction, n int) {
	if n <= 0 {
		return
	}
	if d == toEndpoint {
		c.metrics.BytesToEndpoint.Add(float64(n))
	} else {
		c.metrics.BytesToClient.Add(float64(n))
	}
}

// abortReading handles a failed read from d's source: the source reset or
// broke, so the destination is reset.
func (l *loop) abortReading(c *conn, d direction) {
	l.release(c, d == toClient, d == toEndpoint)
}

// abortWriting handles a failed write to d's destination: the destination
// reset or broke, so the source is reset.
func (l *loop) abortWriting(c *conn, d direction) {
	l.release(c, d == toEndpoint, d == toClient)
}
