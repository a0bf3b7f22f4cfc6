package tcprelay

import (
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/lb/lbmetrics"
)

// direction is one way of a proxied connection.
type direction int

const (
	toEndpoint direction = iota // client → backend
	toClient                    // backend → client
)

func (d direction) reverse() direction { return 1 - d }

type connState uint8

const (
	dialing  connState = iota // client accepted, backend connect in progress
	relaying                  // both sockets connected
	released                  // sockets closed; stale events are ignored
)

// side is one of a connection's two sockets, with the edge-triggered
// readiness the loop has seen for it and the bytes waiting to be written to
// it.
type side struct {
	fd  int
	gen uint32 // registration generation: an event carrying another is stale
	// dialed, dialedTo: the local address of a socket the relay dialed
	// and the endpoint it dialed, while it is in Config.Dials.
	dialed, dialedTo netip.AddrPort
	// kept: a dialed socket bound to the client's address, and the
	// steering of its replies, released when it closes.
	kept keepsource.Flow

	// readable: an event said so, and no read since has drained the socket.
	// writable: no write since the last EPOLLOUT found the send buffer full.
	readable, writable bool
	// finSeen: an event reported the peer's FIN (EPOLLRDHUP), so every
	// byte before it is queued, and a short read reaches the end of stream:
	// no read is needed to find it, and no further event would announce it.
	// broken: an event reported an error or hang-up, which only a read
	// that returns it shows; reading goes on until it does.
	finSeen, broken bool
	eof             bool // reading from this side is over: its FIN was read
	shut            bool // this side was sent our FIN (shutdown SHUT_WR)

	// Bytes read from the other side that this side's send buffer could not
	// take yet: a remainder in a pooled buffer (read/write copying) or the
	// content of a pipe (splice). Reading the other side waits until they
	// are gone; that is the relay's backpressure.
	out    []byte
	outBuf *[]byte
	pipe   *pipe
	inPipe int
}

func (s *side) pending() bool { return len(s.out) > 0 || s.inPipe > 0 }

// conn is one proxied connection, owned by one loop.
type conn struct {
	client, backend side
	state           connState
	moved           [2]int64 // bytes relayed, per direction
	spliced         [2]bool  // the direction copies with splice(2)

	clientIP netip.Addr
	// port is the bound of the connection's service port (its route's);
	// portHeld: the connection holds one of its places.
	port     *fdbudget.Port
	portHeld bool
	// metrics are its route's (Route.metricsOr), kept after the route is
	// dropped: the connection and its bytes count there to the end.
	metrics *lbmetrics.Protocol
	// While dialing: the route that serves the connection (its picker,
	// which hears how the dials went, and its name), the endpoints to try,
	// in order, and the current one's deadline. Dropped once relaying, so
	// that an established connection pins no old picker.
	route     *Route
	endpoints []netip.AddrPort
	attempt   int
	// deadline: while dialing, the connect's; while keepAlivePending,
	// when the dialed socket gets its keep-alive options.
	deadline time.Time
	// keepAlivePending: relaying, and on the loop's unarmed queue.
	keepAlivePending bool

	prev, next   *conn // the loop's connections
	dprev, dnext *conn // the loop's dials or unarmed queue (connQueue)
	deferred     bool  // on the loop's list of connections with more to move
}

// ends returns the source and destination of direction d.
func (c *conn) ends(d direction) (src, dst *side) {
	if d == toEndpoint {
		return &c.client, &c.backend
	}
	return &c.backend, &c.client
}

// finished reports whether direction d has ended: its source's FIN read and
// passed on, nothing left to write.
func (c *conn) finished(d direction) bool {
	src, dst := c.ends(d)
	return src.eof && dst.shut && !dst.pending()
}

// readFD reads what the socket has.
func readFD(fd int, b []byte) (int, error) { return eventloop.Read(fd, b) }

// writeFD writes what the socket's send buffer takes; a full buffer is not
// an error but a short count.
func writeFD(fd int, b []byte) (int, error) {
	n, err := eventloop.Send(fd, b, unix.MSG_NOSIGNAL)
	if err == unix.EAGAIN {
		return 0, nil
	}
	return n, err
}
