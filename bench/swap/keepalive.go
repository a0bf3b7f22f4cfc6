package swap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// keepAliveTimeout bounds one request on the kept-alive connection,
// generously: a request that takes longer ends the connection.
const keepAliveTimeout = 10 * time.Second

// keptAlive is one HTTP/1.1 connection that every request of a stream
// reuses. The first request dials; once the connection has ended, every
// later request fails without dialling again, so a swap that breaks an
// established connection shows.
//
// It speaks HTTP on the connection itself rather than through
// http.Transport: the Transport gives a connection up on its own, with no
// error and nothing from the server, when its writer goroutine reports
// the finished request more than 50 ms after the answer was read
// (net/http's maxWriteWaitBeforeConnReuse). A busy machine delays that
// goroutine so long, and the test then blamed the proxy for a connection
// its own client had closed. Here only the peer, the path or the timeout
// can end the connection.
//
// One goroutine uses a keptAlive at a time.
type keptAlive struct {
	// dial opens the connection (a lab host's DialContext).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// addr is the host:port dialled, also sent as the Host header.
	addr    string
	timeout time.Duration

	conn net.Conn
	br   *bufio.Reader
	// ended says why the connection ended; nil while it lives.
	ended error
}

func newKeptAlive(dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string) *keptAlive {
	return &keptAlive{dial: dial, addr: addr, timeout: keepAliveTimeout}
}

// get asks for path on the connection and returns the status and body.
// A status other than 200 is not an error and leaves the connection open.
func (k *keptAlive) get(path string) (int, string, error) {
	if k.ended != nil {
		return 0, "", fmt.Errorf("the kept-alive connection ended earlier (%w); not dialling another", k.ended)
	}
	if k.conn == nil {
		ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
		defer cancel()
		conn, err := k.dial(ctx, "tcp", k.addr)
		if err != nil {
			k.ended = fmt.Errorf("dialling %s: %w", k.addr, err)
			return 0, "", k.ended
		}
		k.conn, k.br = conn, bufio.NewReader(conn)
	}
	status, body, closing, err := k.exchange(path)
	if err != nil {
		k.end(err)
		return 0, "", err
	}
	if closing {
		k.end(errors.New("the server answered with Connection: close"))
	}
	return status, body, nil
}

// exchange writes one request and reads its answer.
func (k *keptAlive) exchange(path string) (status int, body string, closing bool, err error) {
	if err := k.conn.SetDeadline(time.Now().Add(k.timeout)); err != nil {
		return 0, "", false, fmt.Errorf("setting a deadline: %w", err)
	}
	if _, err := fmt.Fprintf(k.conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, k.addr); err != nil {
		return 0, "", false, fmt.Errorf("GET %s on %s: writing the request: %s", path, k.describe(), how(err))
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return 0, "", false, fmt.Errorf("GET %s on %s: reading the answer: %s", path, k.describe(), how(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", false, fmt.Errorf("GET %s on %s: reading the body: %s", path, k.describe(), how(err))
	}
	return resp.StatusCode, string(data), resp.Close, nil
}

// end records why the connection ended and closes it: after an error the
// next answer on it could be the failed request's.
func (k *keptAlive) end(why error) {
	k.ended = why
	k.conn.Close()
}

// local is the connection's own address, once dialled.
func (k *keptAlive) local() (*net.TCPAddr, bool) {
	if k.conn == nil {
		return nil, false
	}
	addr, ok := k.conn.LocalAddr().(*net.TCPAddr)
	return addr, ok
}

func (k *keptAlive) describe() string {
	return fmt.Sprintf("%s -> %s", k.conn.LocalAddr(), k.conn.RemoteAddr())
}

// how names what an error on the connection says about its end: which
// side closed it, and how.
func how(err error) string {
	var why string
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		why = "a FIN: the server, or a node on the path, closed the connection"
	case errors.Is(err, syscall.ECONNRESET):
		why = "a RST: the server, or a node on the path, reset the connection"
	case errors.Is(err, os.ErrDeadlineExceeded):
		why = "no answer within the deadline"
	default:
		return err.Error()
	}
	return fmt.Sprintf("%v (%s)", err, why)
}
