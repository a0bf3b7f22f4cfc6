package tcprelay

import (
	"errors"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/selfdial"
)

// A shared listener is tested without socket-lookup steering: every
// 127.0.0.0/8 address (and every address of a local route) is local, so a
// listener bound to a wildcard address on port P, reached through
// 127.0.0.1:P and 127.0.0.2:P, accepts connections with two different
// local addresses, as steered connections for two service addresses would
// have.

// namedBackend serves connections by writing its name, then echoing.
func namedBackend(t testing.TB, name string) netip.AddrPort {
	t.Helper()
	return serveAt(t, "tcp4", "127.0.0.1:0", func(c *net.TCPConn) {
		if _, err := c.Write([]byte(name)); err == nil {
			echo(c)
		}
	})
}

// servedBy dials ap and returns the name of the backend that answers, after
// checking that the relay echoes both ways.
func servedBy(t testing.TB, ap netip.AddrPort, nameLen int) (string, *net.TCPConn) {
	t.Helper()
	c := dial(t, ap)
	name := make([]byte, nameLen)
	if _, err := io.ReadFull(c, name); err != nil {
		t.Fatalf("reading the backend's name through %s: %v", ap, err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo through %s = %q, %v; want ping", ap, got, err)
	}
	return string(name), c
}

// routeSpec describes one route of a test's shared listener.
type routeSpec struct {
	backend string // the backend the route's picker picks; "" with empty false: a nil picker
	empty   bool   // a picker that picks no endpoint
	admit   func(netip.Addr) bool
	// loop: the route's endpoint is its own service address, so the
	// relay's dial comes back into the listener.
	loop bool
}

var rejectionReasons = []string{
	lbmetrics.ReasonNoEndpoints, lbmetrics.ReasonDirect, lbmetrics.ReasonFDExhausted, lbmetrics.ReasonDialFailed,
	lbmetrics.ReasonSourceRange, lbmetrics.ReasonLoop, lbmetrics.ReasonPortFull,
}

// TestSharedListenerRoutes serves several service addresses from one
// listener, each connection by the route of its local address.
func TestSharedListenerRoutes(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	lab.Run(t, "ip", "-6", "route", "replace", "local", "fd00:18::/64", "dev", "lo")
	backends := map[string]netip.AddrPort{"a": namedBackend(t, "a"), "b": namedBackend(t, "b")}
	type dialSpec struct {
		to      string // the address the client dials, on the listener's port
		backend string // the backend that must answer; "" : the client is reset
		refused string // then: the rejection reason counted
	}
	loopback := func(a netip.Addr) bool { return a.IsLoopback() }
	for _, tc := range []struct {
		name            string
		network, listen string
		routes          map[string]routeSpec // by service address, on the listener's port
		dials           []dialSpec
		// racing: a reason the case may count or not, as the loops'
		// events come.
		racing string
	}{{
		name: "two routes, two backends", network: "tcp4", listen: "0.0.0.0:0",
		routes: map[string]routeSpec{"127.0.0.1": {backend: "a"}, "127.0.0.2": {backend: "b"}},
		dials:  []dialSpec{{to: "127.0.0.1", backend: "a"}, {to: "127.0.0.2", backend: "b"}, {to: "127.0.0.1", backend: "a"}},
	}, {
		name: "no route", network: "tcp4", listen: "0.0.0.0:0",
		routes: map[string]routeSpec{"127.0.0.1": {backend: "a"}},
		dials:  []dialSpec{{to: "127.0.0.3", refused: lbmetrics.ReasonDirect}, {to: "127.0.0.1", backend: "a"}},
	}, {
		name: "route without endpoints", network: "tcp4", listen: "0.0.0.0:0",
		routes: map[string]routeSpec{"127.0.0.1": {backend: "a"}, "127.0.0.2": {}, "127.0.0.3": {empty: true}},
		dials: []dialSpec{{to: "127.0.0.2", refused: lbmetrics.ReasonNoEndpoints},
			{to: "127.0.0.3", refused: lbmetrics.ReasonNoEndpoints}, {to: "127.0.0.1", backend: "a"}},
	}, {
		name: "source ranges per route", network: "tcp4", listen: "0.0.0.0:0",
		routes: map[string]routeSpec{
			"127.0.0.1": {backend: "a", admit: loopback},
			"127.0.0.2": {backend: "b", admit: func(netip.Addr) bool { return false }},
		},
		dials: []dialSpec{{to: "127.0.0.2", refused: lbmetrics.ReasonSourceRange}, {to: "127.0.0.1", backend: "a"}},
	}, {
		name: "the listener's own address", network: "tcp4", listen: "127.0.0.1:0",
		routes: map[string]routeSpec{"127.0.0.1": {backend: "a"}},
		dials:  []dialSpec{{to: "127.0.0.1", refused: lbmetrics.ReasonDirect}},
	}, {
		name: "an endpoint leading back into the listener", network: "tcp4", listen: "0.0.0.0:0",
		routes: map[string]routeSpec{"127.0.0.1": {backend: "a"}, "127.0.0.2": {loop: true}},
		dials:  []dialSpec{{to: "127.0.0.2", refused: lbmetrics.ReasonLoop}, {to: "127.0.0.1", backend: "a"}},
		// The refused loop resets the relay's own dial, which its loop
		// may see before or after the connect completed.
		racing: lbmetrics.ReasonDialFailed,
	}, {
		name: "IPv4 clients of a dual-stack listener", network: "tcp", listen: "[::]:0",
		routes: map[string]routeSpec{"127.0.0.1": {backend: "a"}, "127.0.0.2": {backend: "b"}},
		dials:  []dialSpec{{to: "127.0.0.1", backend: "a"}, {to: "127.0.0.2", backend: "b"}, {to: "127.0.0.3", refused: lbmetrics.ReasonDirect}},
	}, {
		name: "IPv6", network: "tcp6", listen: "[::]:0",
		routes: map[string]routeSpec{"::1": {backend: "a"}, "fd00:18::20": {backend: "b"}},
		dials: []dialSpec{{to: "::1", backend: "a"}, {to: "fd00:18::20", backend: "b"},
			{to: "fd00:18::21", refused: lbmetrics.ReasonDirect}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen(tc.network, tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			port := uint16(ln.Addr().(*net.TCPAddr).Port)
			metrics, err := lbmetrics.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			routes := map[netip.AddrPort]*Route{}
			// Each route counts into its own service port's counters, as
			// well as into the node-wide series.
			counts := map[string]*lbmetrics.PortCounters{}
			for host, spec := range tc.routes {
				ap := netip.AddrPortFrom(netip.MustParseAddr(host), port)
				counts[host] = &lbmetrics.PortCounters{}
				r := &Route{Name: host, Admit: spec.admit,
					Metrics: metrics.WithPort(lbmetrics.ProtocolTCP, counts[host]).For(lbmetrics.ProtocolTCP)}
				switch {
				case spec.loop:
					r.Picker = newPicker(ap)
				case spec.empty:
					r.Picker = newPicker()
				case spec.backend != "":
					r.Picker = newPicker(backends[spec.backend])
				}
				routes[ap] = r
			}
			dials := selfdial.New()
			tp := startProxyOn(t, ln, Config{Direct: true, Dials: dials, Metrics: metrics, Routes: func(local netip.AddrPort) (*Route, bool) {
				r, ok := routes[local]
				return r, ok
			}})
			want := map[string]float64{}
			wantPorts := map[string]*portCounts{}
			for host := range tc.routes {
				wantPorts[host] = &portCounts{}
			}
			for _, d := range tc.dials {
				to := netip.AddrPortFrom(netip.MustParseAddr(d.to), port)
				if d.backend == "" {
					expectRefused(t, to)
					want[d.refused]++
					// Refused before its route is known, or for a loop:
					// the listener's alone.
					if w := wantPorts[d.to]; w != nil && d.refused != lbmetrics.ReasonDirect && d.refused != lbmetrics.ReasonLoop {
						w.refuse(d.refused)
					}
					continue
				}
				if got, c := servedBy(t, to, len(d.backend)); got != d.backend {
					t.Errorf("%s served by backend %q, want %q", to, got, d.backend)
				} else {
					c.Close()
				}
				// servedBy reads the backend's name, then echoes "ping".
				w := wantPorts[d.to]
				w.Connections++
				w.BytesToEndpoint += 4
				w.BytesToClient += uint64(len(d.backend)) + 4
			}
			for _, reason := range rejectionReasons {
				if reason == tc.racing {
					continue
				}
				eventually(t, "rejections counted", func() bool { return counter(tp, "rejected", reason) >= want[reason] })
				if got := counter(tp, "rejected", reason); got != want[reason] {
					t.Errorf("rejected %s = %v, want %v", reason, got, want[reason])
				}
			}
			eventually(t, "every dial of the relay forgotten", func() bool { return dials.Len() == 0 })
			if tc.racing != "" {
				return // a loop's own dial may count as a connection or not
			}
			var sum portCounts
			for host, w := range wantPorts {
				var got portCounts
				eventually(t, host+"'s counters", func() bool {
					got = countsOf(counts[host])
					return got.equal(w)
				})
				if !got.equal(w) {
					t.Errorf("route %s counted %+v, want %+v", host, got, *w)
				}
				sum.Connections += w.Connections
				sum.BytesToEndpoint += w.BytesToEndpoint
				sum.BytesToClient += w.BytesToClient
			}
			for _, total := range []struct {
				name      string
				got, want float64
			}{
				{"connections", counter(tp, "connections"), float64(sum.Connections)},
				{"active", counter(tp, "active"), 0},
				{"bytes to endpoint", counter(tp, "bytes", lbmetrics.DirectionToEndpoint), float64(sum.BytesToEndpoint)},
				{"bytes to client", counter(tp, "bytes", lbmetrics.DirectionToClient), float64(sum.BytesToClient)},
			} {
				if total.got != total.want {
					t.Errorf("node-wide %s = %v, want %v (the routes' sum)", total.name, total.got, total.want)
				}
			}
		})
	}
}

// portCounts is a route's lbmetrics.PortCounters as plain numbers.
type portCounts struct {
	Connections, DialFailures, BytesToEndpoint, BytesToClient uint64
	Active                                                    int64
	Refused                                                   map[string]uint64
}

func countsOf(c *lbmetrics.PortCounters) portCounts {
	return portCounts{Connections: c.Connections.Load(), DialFailures: c.DialFailures.Load(), Active: c.Active.Load(),
		BytesToEndpoint: c.BytesToEndpoint.Load(), BytesToClient: c.BytesToClient.Load(), Refused: c.Refused()}
}

func (p *portCounts) refuse(reason string) {
	if p.Refused == nil {
		p.Refused = map[string]uint64{}
	}
	p.Refused[reason]++
}

func (p portCounts) equal(o *portCounts) bool {
	return p.Connections == o.Connections && p.DialFailures == o.DialFailures && p.Active == o.Active &&
		p.BytesToEndpoint == o.BytesToEndpoint && p.BytesToClient == o.BytesToClient && maps.Equal(p.Refused, o.Refused)
}

// servicePort is one route of twoServicePorts: the address it is reached
// at and its service port's bound.
type servicePort struct {
	addr netip.AddrPort
	port *fdbudget.Port
}

// twoServicePorts starts a shared listener with two routes, a (reached at
// 127.0.0.1) and b (127.0.0.2), each to its own named backend and with its
// own bound of limits; loops is Config.Loops.
func twoServicePorts(t *testing.T, limits fdbudget.PortLimits, loops int) (*testProxy, servicePort, servicePort) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4zero})
	if err != nil {
		t.Fatal(err)
	}
	listenPort := uint16(ln.Addr().(*net.TCPAddr).Port)
	routes := map[netip.AddrPort]*Route{}
	var sps [2]servicePort
	for i, name := range []string{"a", "b"} {
		bound, err := fdbudget.NewPort(limits)
		if err != nil {
			t.Fatal(err)
		}
		sps[i] = servicePort{netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}), listenPort), bound}
		routes[sps[i].addr] = &Route{Name: name, Picker: newPicker(namedBackend(t, name)), Port: bound}
	}
	tp := startProxyOn(t, ln, Config{Direct: true, Loops: loops, Routes: func(local netip.AddrPort) (*Route, bool) {
		r, ok := routes[local]
		return r, ok
	}})
	return tp, sps[0], sps[1]
}

// TestSharedListenerPortBounds: each route's connections count against its
// own service port's bound, which they release when they end; one service
// port at its bound refuses its new connections and not another's.
func TestSharedListenerPortBounds(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	tp, a, b := twoServicePorts(t, fdbudget.PortLimits{Connections: 1, Dialing: 1}, 0)
	addrA, portA, addrB, portB := a.addr, a.port, b.addr, b.port

	_, heldA := servedBy(t, addrA, 1)
	if held, _ := portA.Held(); held != 1 {
		t.Fatalf("service port a holds %d connections, want 1", held)
	}
	expectRefused(t, addrA)
	eventually(t, "the full service port's refusal counted", func() bool {
		return counter(tp, "rejected", lbmetrics.ReasonPortFull) == 1
	})
	if name, c := servedBy(t, addrB, 1); name != "b" {
		t.Errorf("service port b served by %q, want b", name)
	} else {
		c.Close()
	}
	heldA.Close()
	eventually(t, "both service ports released", func() bool {
		a, ad := portA.Held()
		b, bd := portB.Held()
		return a+ad+b+bd == 0
	})
	if name, c := servedBy(t, addrA, 1); name != "a" {
		t.Errorf("service port a served by %q after its connection ended, want a", name)
	} else {
		c.Close()
	}
	if n := counter(tp, "rejected", lbmetrics.ReasonPortFull); n != 1 {
		t.Errorf("rejected service_port_full = %v, want 1", n)
	}
}

// TestSharedListenerNeedsDirect: a shared listener's connections arrive
// unrewritten, so Routes without Direct is a configuration error.
func TestSharedListenerNeedsDirect(t *testing.T) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	routes := func(netip.AddrPort) (*Route, bool) { return nil, false }
	if _, err := New(Config{Listener: ln, Routes: routes}); err == nil {
		t.Error("New accepted Routes without Direct")
	}
}

// TestSharedListenerResetPort: a departed service's established
// connections are reset, another service's keep relaying.
func TestSharedListenerResetPort(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	tp, a, b := twoServicePorts(t, fdbudget.PortLimits{Connections: 8, Dialing: 8}, 2)
	addrA, portA, addrB := a.addr, a.port, b.addr
	var connsA []*net.TCPConn
	for range 3 {
		_, c := servedBy(t, addrA, 1)
		connsA = append(connsA, c)
	}
	_, connB := servedBy(t, addrB, 1)

	tp.ResetPort(portA)
	for i, c := range connsA {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 8)); n > 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection %d of the reset service port: read %d bytes, %v; want it reset", i, n, err)
		}
	}
	if _, err := connB.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	_ = connB.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(connB, got); err != nil || string(got) != "pong" {
		t.Errorf("the other service port's connection after the reset: %q, %v; want it relaying", got, err)
	}
	eventually(t, "the reset service port released", func() bool {
		held, dialing := portA.Held()
		return held+dialing == 0
	})
}
