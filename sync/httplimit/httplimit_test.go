package httplimit

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// serve runs a hardened server on a limited loopback listener.
func serve(t *testing.T, total, perSource int) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Limit(ln, total, perSource)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	Harden(srv, true)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l, ln.Addr().String()
}

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
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name             string
		total, perSource int
		holders          map[string]int // idle connections per source
		from             string
		wantServed       bool
	}{
		{"one host holding many connections cannot lock others out", 10, 4, map[string]int{"127.0.0.2": 50}, "127.0.0.3", true},
		{"that host itself is held to its share", 10, 4, map[string]int{"127.0.0.2": 50}, "127.0.0.2", false},
		{"many hosts at once hit the total", 6, 4, map[string]int{"127.0.0.2": 3, "127.0.0.4": 3}, "127.0.0.3", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, addr := serve(t, tc.total, tc.perSource)
			for src, n := range tc.holders {
				hold(t, addr, src, n)
			}
			time.Sleep(100 * time.Millisecond) // let the server accept them
			err := get(addr, tc.from)
			if served := err == nil; served != tc.wantServed {
				t.Errorf("request from %s: %v; want served %v", tc.from, err, tc.wantServed)
			}
			all, _ := l.Open(netip.Addr{})
			if all > tc.total {
				t.Errorf("%d connections open, over the total %d", all, tc.total)
			}
		})
	}
}

func TestIdleConnectionsAreClosed(t *testing.T) {
	l, addr := serve(t, 10, 10)
	hold(t, addr, "127.0.0.2", 3)
	time.Sleep(100 * time.Millisecond)
	if _, n := l.Open(netip.MustParseAddr("127.0.0.2")); n != 3 {
		t.Fatalf("%d connections held, want 3", n)
	}
	// Connections that never send a request are closed after ReadTimeout.
	deadline := time.Now().Add(ReadTimeout + 5*time.Second)
	for {
		if _, n := l.Open(netip.MustParseAddr("127.0.0.2")); n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle connections still held %v after they were opened", ReadTimeout+5*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
