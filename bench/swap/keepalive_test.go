package swap

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// lateWriter returns from each write only some time after the bytes left,
// as a writer goroutine that a busy machine does not schedule in time.
type lateWriter struct {
	net.Conn
	late time.Duration
}

func (w lateWriter) Write(b []byte) (int, error) {
	n, err := w.Conn.Write(b)
	time.Sleep(w.late)
	return n, err
}

// TestKeptAlive checks the kept-alive client of the swap's traffic: only
// the server (or the path) ends its connection, never a slow client, and
// once ended it fails every request without dialling again, saying how the
// connection ended.
func TestKeptAlive(t *testing.T) {
	// hijack ends the connection when the server reads request number end
	// (from 1): with a FIN, or with a RST (linger 0).
	hijack := func(end int, reset bool) func(n int, w http.ResponseWriter) {
		return func(n int, w http.ResponseWriter) {
			if n < end {
				io.WriteString(w, "web-1\n")
				return
			}
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijacking: %v", err)
				return
			}
			if reset {
				conn.(*net.TCPConn).SetLinger(0)
			}
			conn.Close()
		}
	}
	for _, tc := range []struct {
		name string
		// late delays every write's return on the client.
		late  time.Duration
		serve func(n int, w http.ResponseWriter)
		// answered is how many of the requests are answered before the
		// connection ends; wantEnd is in the error of those after.
		answered int
		wantEnd  string
	}{
		{
			// http.Transport dropped its connection here (the writer
			// reported after its 50 ms), and the swap test failed.
			name: "a client whose writes return 100 ms late keeps its connection",
			late: 100 * time.Millisecond, serve: hijack(100, false), answered: 5,
		},
		{
			name: "a FIN from the server ends it", serve: hijack(3, false), answered: 2,
			wantEnd: "a FIN: the server, or a node on the path, closed the connection",
		},
		{
			name: "a RST ends it", serve: hijack(3, true), answered: 2,
			wantEnd: "a RST: the server, or a node on the path, reset the connection",
		},
		{
			name: "Connection: close ends it after that answer",
			serve: func(n int, w http.ResponseWriter) {
				if n == 2 {
					w.Header().Set("Connection", "close")
				}
				io.WriteString(w, "web-1\n")
			},
			answered: 2, wantEnd: "the server answered with Connection: close",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests, conns atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tc.serve(int(requests.Add(1)), w)
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()

			var dials atomic.Int32
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				var d net.Dialer
				conn, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return lateWriter{conn, tc.late}, nil
			}
			kept := newKeptAlive(dial, srv.Listener.Addr().String())
			const asked = 5
			for i := range asked {
				status, body, err := kept.get("/")
				switch {
				case i < tc.answered && (err != nil || status != 200 || body != "web-1\n"):
					t.Fatalf("request %d: %d %q %v, want 200 \"web-1\\n\"", i+1, status, body, err)
				case i >= tc.answered && err == nil:
					t.Fatalf("request %d: answered %d %q after the connection should have ended", i+1, status, body)
				case i >= tc.answered && !strings.Contains(err.Error(), tc.wantEnd):
					t.Fatalf("request %d: %v, want it to say %q", i+1, err, tc.wantEnd)
				}
			}
			if d, c := dials.Load(), conns.Load(); d != 1 || c != 1 {
				t.Errorf("%d requests: %d dials, %d connections at the server; want 1 and 1", asked, d, c)
			}
		})
	}
}
