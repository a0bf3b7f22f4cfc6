package httplimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestVictim(t *testing.T) {
	now := time.Unix(1000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	a, b, c := netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2"), netip.MustParseAddr("198.19.0.3")
	tests := []struct {
		name string
		held []candidate
		src  netip.Addr // the newcomer's source
		want int        // index into held, -1 to refuse
	}{
		{"nothing to close: refuse", nil, a, -1},
		{"the one waiting longest, among equal sources",
			[]candidate{{source: a, since: ago(time.Second)}, {source: b, since: ago(3 * time.Second)}, {source: c, since: ago(2 * time.Second)}},
			netip.MustParseAddr("198.19.0.9"), 1},
		{"a source holding more loses one, even a newer one",
			[]candidate{{source: a, since: ago(time.Minute)}, {source: b, since: ago(time.Second)}, {source: b, since: ago(2 * time.Second)}},
			c, 2},
		{"the newcomer's source counts the newcomer: it replaces its own",
			[]candidate{{source: a, since: ago(time.Minute)}, {source: a, since: ago(time.Minute)}, {source: b, since: ago(time.Second)}, {source: b, since: ago(2 * time.Second)}},
			b, 3},
		{"a connection answering a request is spared while another waits",
			[]candidate{{source: a, serving: true, since: ago(time.Hour)}, {source: a, serving: true, since: ago(time.Hour)}, {source: b, since: ago(time.Millisecond)}},
			c, 2},
		{"an answer that has just started is never cut: refuse",
			[]candidate{{source: a, serving: true, since: ago(ServeGrace / 2)}, {source: b, serving: true, since: now}},
			c, -1},
		{"when every connection is answering, one past the grace goes",
			[]candidate{{source: a, serving: true, since: ago(ServeGrace / 2)}, {source: b, serving: true, since: ago(ServeGrace)}},
			c, 1},
		{"slowloris from many sources against a probe's source",
			[]candidate{
				{source: a, since: ago(4 * time.Second)}, {source: a, since: ago(time.Second)},
				{source: b, since: ago(time.Millisecond)}, // the probe, just accepted
				{source: c, since: ago(3 * time.Second)}, {source: c, since: ago(2 * time.Second)},
			},
			a, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bySource := map[netip.Addr]int{}
			for _, h := range tc.held {
				bySource[h.source]++
			}
			if got := victim(tc.held, bySource, tc.src, now); got != tc.want {
				t.Errorf("victim = %d, want %d", got, tc.want)
			}
		})
	}
}

// serve runs a hardened server on a limited loopback listener.
func serve(t *testing.T, total, perSource int, handler http.Handler) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Limit(ln, total, perSource)
	srv := &http.Server{Handler: handler}
	l.Harden(srv, true)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l, ln.Addr().String()
}

var answer = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// hold opens n idle connections from source (a loopback address).
func hold(t *testing.T, addr, source string, n int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

func get(addr, source string) error {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}).DialContext, DisableKeepAlives: true}
	client := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// waitOpen polls until the listener holds want connections.
func waitOpen(t *testing.T, l *Listener, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, _ := l.Open(netip.Addr{})
		if all == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", all, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLimitsMakeRoom(t *testing.T) {
	tests := []struct {
		name             string
		total, perSource int
		holders          map[string]int // idle connections per source
		from             string
	}{
		{"one host holding many connections cannot lock others out", 10, 4, map[string]int{"127.0.0.2": 50}, "127.0.0.3"},
		{"a host at its share replaces its own oldest", 10, 4, map[string]int{"127.0.0.2": 50}, "127.0.0.2"},
		{"hosts filling the total give way to a newcomer", 6, 4, map[string]int{"127.0.0.2": 3, "127.0.0.4": 3}, "127.0.0.3"},
		{"hosts each at their share give way to a newcomer", 8, 4, map[string]int{"127.0.0.2": 4, "127.0.0.4": 4}, "127.0.0.3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, addr := serve(t, tc.total, tc.perSource, answer)
			want := 0
			for src, n := range tc.holders {
				hold(t, addr, src, n)
				want += min(n, tc.perSource)
			}
			waitOpen(t, l, min(want, tc.total))
			if err := get(addr, tc.from); err != nil {
				t.Errorf("request from %s: %v", tc.from, err)
			}
			all, _ := l.Open(netip.Addr{})
			if all > tc.total {
				t.Errorf("%d connections open, over the total %d", all, tc.total)
			}
			for src := range tc.holders {
				if _, n := l.Open(netip.MustParseAddr(src)); n > tc.perSource {
					t.Errorf("%s holds %d connections, over its share %d", src, n, tc.perSource)
				}
			}
		})
	}
}

// A request being answered is not cut short for a newcomer: when every
// connection is answering one, the newcomer is refused, and the answers
// still arrive.
func TestConnectionsAnsweringAreSpared(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	l, addr := serve(t, 2, 2, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		started.Done()
		<-release
		_, _ = io.WriteString(w, "ok")
	}))
	answers := make(chan error, 2)
	for _, src := range []string{"127.0.0.2", "127.0.0.4"} {
		go func() { answers <- get(addr, src) }()
	}
	started.Wait()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 3 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Errorf("the newcomer was answered %q while both connections were answering requests", strings.TrimSpace(line))
	}
	close(release)
	for range 2 {
		if err := <-answers; err != nil {
			t.Errorf("a request being answered was cut: %v", err)
		}
	}
	if all, _ := l.Open(netip.Addr{}); all > 2 {
		t.Errorf("%d connections open, over the total 2", all)
	}
}

func TestSlowHeadersAreClosed(t *testing.T) {
	l, addr := serve(t, 10, 10, answer)
	hold(t, addr, "127.0.0.2", 3)
	waitOpen(t, l, 3)
	// Connections that never finish a request's headers are closed after
	// ReadHeaderTimeout, with nobody else asking for room.
	deadline := time.Now().Add(ReadHeaderTimeout + 5*time.Second)
	for {
		if _, n := l.Open(netip.MustParseAddr("127.0.0.2")); n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle connections still held %v after they were opened", ReadHeaderTimeout+5*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
