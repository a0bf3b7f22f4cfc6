package tcprelay

import (
	"io"
	"net"
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/lb/lbmetrics"
)

// TestDirectListenerAndAdmission runs a Proxy the way a local portal does:
// listening on the service address itself, with no REDIRECT and so no
// original destination, and a source-range check at accept.
func TestDirectListenerAndAdmission(t *testing.T) {
	for _, tc := range []struct {
		name      string
		admit     func(netip.Addr) bool
		wantRelay bool
	}{
		{name: "every client admitted", admit: nil, wantRelay: true},
		{name: "client inside the ranges", admit: func(a netip.Addr) bool { return a.IsLoopback() }, wantRelay: true},
		{name: "client outside the ranges", admit: func(netip.Addr) bool { return false }, wantRelay: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := serve(t, echo)
			ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			tp := startProxyOn(t, ln, Config{Picker: newPicker(backend), Direct: true, Admit: tc.admit})
			addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tp.port)
			if !tc.wantRelay {
				expectRefused(t, addr)
				eventually(t, "the source-range rejection counted", func() bool {
					return counter(tp, "rejected", lbmetrics.ReasonSourceRange) == 1
				})
				return
			}
			c := dial(t, addr)
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 4)
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
				t.Fatalf("echo through a direct listener = %q, %v; want ping", got, err)
			}
			if n := counter(tp, "rejected", lbmetrics.ReasonDirect); n != 0 {
				t.Errorf("rejected as direct = %v, want 0: a direct listener has no original destination to check", n)
			}
		})
	}
}
