package tcprelay

import (
	"io"
	"net"
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/selfdial"
)

// TestLoopsAreRefused: a proxy whose endpoint leads back into a proxy of
// the same process (itself, through a local listener or a REDIRECT portal,
// or another proxy that leads back to it) refuses the connection that comes
// back, so the client is reset at once instead of the relays dialling
// themselves until no descriptor is left; the refusal is counted as a loop
// and nothing stays held.
func TestLoopsAreRefused(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	setupNamespace(t)
	listen := func(t *testing.T, ap netip.AddrPort) *net.TCPListener {
		ln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(ap))
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	for _, tc := range []struct {
		name string
		// start starts the proxies sharing dials and returns the address
		// the client asks and every proxy.
		start func(t *testing.T, dials *selfdial.Dials) (netip.AddrPort, []*testProxy)
	}{
		{"a local listener that is its own endpoint", func(t *testing.T, dials *selfdial.Dials) (netip.AddrPort, []*testProxy) {
			addr := vip()
			p := startProxyOn(t, listen(t, addr), Config{Picker: newPicker(addr), Direct: true, Dials: dials})
			return addr, []*testProxy{p}
		}},
		{"two local listeners that are each other's endpoint", func(t *testing.T, dials *selfdial.Dials) (netip.AddrPort, []*testProxy) {
			a, b := vip(), vip()
			pa := startProxyOn(t, listen(t, a), Config{Picker: newPicker(b), Direct: true, Dials: dials, Name: "a"})
			pb := startProxyOn(t, listen(t, b), Config{Picker: newPicker(a), Direct: true, Dials: dials, Name: "b"})
			return a, []*testProxy{pa, pb}
		}},
		{"a REDIRECT portal whose endpoint is its own service address", func(t *testing.T, dials *selfdial.Dials) (netip.AddrPort, []*testProxy) {
			addr := vip()
			p := startProxy(t, Config{Picker: newPicker(addr), Dials: dials,
				IsPortalDestination: func(dst netip.AddrPort) bool { return dst == addr }})
			portal(t, addr, p.port)
			return addr, []*testProxy{p}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dials := selfdial.New()
			addr, proxies := tc.start(t, dials)
			for range 3 {
				expectRefused(t, addr)
			}
			eventually(t, "every refusal counted as a loop, nothing held", func() bool {
				var loops, active float64
				for _, p := range proxies {
					loops += counter(p, "rejected", lbmetrics.ReasonLoop)
					active += counter(p, "active")
				}
				return loops == 3 && active == 0 && dials.Len() == 0
			})
		})
	}
}

// TestServicePortBound: a service port's connections past its share are
// reset at accept and counted; once one ends, a new one is served.
func TestServicePortBound(t *testing.T) {
	backend := serve(t, echo)
	port, err := fdbudget.NewPort(fdbudget.PortLimits{Connections: 2, Dialing: 2})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxyOn(t, ln, Config{Picker: newPicker(backend), Direct: true, Port: port})
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tp.port)
	echoed := func(c *net.TCPConn) {
		t.Helper()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
			t.Fatalf("echo = %q, %v; want ping", got, err)
		}
	}
	first, second := dial(t, addr), dial(t, addr)
	echoed(first)
	echoed(second)
	expectRefused(t, addr)
	if n := counter(tp, "rejected", lbmetrics.ReasonPortFull); n != 1 {
		t.Errorf("rejected as service_port_full = %v, want 1", n)
	}
	first.Close()
	eventually(t, "the closed connection's place given back", func() bool {
		held, _ := port.Held()
		return held == 1
	})
	echoed(dial(t, addr))
	if held, dialing := port.Held(); held != 2 || dialing != 0 {
		t.Errorf("held %d, dialing %d; want 2 and 0", held, dialing)
	}
}
