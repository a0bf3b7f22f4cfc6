package udprelay

import (
	"bytes"
	"crypto/rand"
	"maps"
	"net"
	"net/netip"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/rawudp"
)

// routeTable is a Routes function over a map the test changes.
type routeTable struct {
	mu     sync.Mutex
	routes map[netip.AddrPort]*Route
}

func (rt *routeTable) lookup(local netip.AddrPort) (*Route, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r, ok := rt.routes[local]
	return r, ok
}

// family is one IP family of the shared-socket tests: a shared socket
// bound to the wildcard address is reached through several local
// addresses, each a different original destination, as socket-lookup
// steering delivers service addresses to it.
type family struct {
	name, network string
	wildcard      string // the shared socket's address
	loopback      string // clients, backends, and a socket bound to it for the own-address case
	a, b, none    netip.Addr
}

var families = []family{
	{name: "ipv4", network: "udp4", wildcard: "0.0.0.0:0", loopback: "127.0.0.1",
		a: netip.MustParseAddr("127.0.0.2"), b: netip.MustParseAddr("127.0.0.3"), none: netip.MustParseAddr("127.0.0.4")},
	{name: "ipv6", network: "udp6", wildcard: "[::]:0", loopback: "::1",
		a: netip.MustParseAddr("fd00:19::2"), b: netip.MustParseAddr("fd00:19::3"), none: netip.MustParseAddr("fd00:19::4")},
}

// sharedRig is a relay on a shared socket with its route table.
type sharedRig struct {
	testRelay
	routes *routeTable
	port   uint16
}

func startShared(t *testing.T, fam family, bind string, replies *rawudp.Socket, routes map[netip.AddrPort]*Route) sharedRig {
	t.Helper()
	conn, err := net.ListenUDP(fam.network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(bind)))
	if err != nil {
		t.Fatalf("shared socket: %v", err)
	}
	table := &routeTable{routes: routes}
	r := startRelay(t, Config{Conn: conn, Routes: table.lookup, Replies: replies, IdleTimeout: time.Hour})
	return sharedRig{testRelay: r, routes: table, port: r.Addr().Port()}
}

// dialService is a client connected to addr:port from the family's
// loopback address: the kernel hands it only datagrams whose source is
// exactly addr:port, so a reply from any other address or port is lost.
func dialService(t *testing.T, fam family, addr netip.Addr, port uint16) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP(fam.network, &net.UDPAddr{IP: net.ParseIP(fam.loopback)},
		net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, port)))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func echoRoute(name string, echo *echoServer) *Route {
	return &Route{Name: name, Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}}
}

// TestSharedSocket serves two service addresses from one socket, per IP
// family. Every client is connected to the service address it writes to,
// so each reply checks its source address and port.
func TestSharedSocket(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	// Loopback's MTU is cut so the large datagrams are fragmented both ways.
	for _, args := range [][]string{
		{"link", "set", "lo", "mtu", "1500"},
		{"-6", "addr", "add", "fd00:19::2/128", "dev", "lo"},
		{"-6", "addr", "add", "fd00:19::3/128", "dev", "lo"},
		{"-6", "addr", "add", "fd00:19::4/128", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	replies, err := rawudp.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer replies.Close()

	type rig struct {
		sharedRig
		fam          family
		echoA, echoB *echoServer
		a, b         netip.AddrPort // the two service addresses
		// countsA and countsB are the two routes' service port counters.
		countsA, countsB *lbmetrics.PortCounters
	}
	cases := []struct {
		name  string
		admit func(netip.Addr) bool // route a's
		check func(t *testing.T, r rig)
	}{
		{name: "each route reaches its own endpoint", check: func(t *testing.T, r rig) {
			for _, c := range []struct {
				to   netip.AddrPort
				echo *echoServer
			}{{r.a, r.echoA}, {r.b, r.echoB}} {
				client := dialService(t, r.fam, c.to.Addr(), c.to.Port())
				if got := roundTrip(t, client, []byte("to "+c.to.String())); string(got) != "to "+c.to.String() {
					t.Fatalf("reply %q", got)
				}
				if c.echo.datagrams() != 1 {
					t.Errorf("the endpoint of %v got %d datagrams, want 1", c.to, c.echo.datagrams())
				}
			}
			if got := r.FlowCount(); got != 2 {
				t.Errorf("FlowCount = %d, want 2", got)
			}
		}},
		{name: "no route drops and counts", check: func(t *testing.T, r rig) {
			client := dialService(t, r.fam, r.fam.none, r.port)
			for range 3 {
				expectNoReply(t, client, []byte("nobody serves this"))
			}
			direct := r.metrics.For(lbmetrics.ProtocolUDP).RejectedDirect
			eventually(t, "3 drops counted", func() bool { return testutil.ToFloat64(direct) == 3 })
			if n := r.echoA.datagrams() + r.echoB.datagrams(); n != 0 {
				t.Errorf("the endpoints got %d datagrams", n)
			}
		}},
		{name: "admit refusal drops and counts", admit: func(netip.Addr) bool { return false }, check: func(t *testing.T, r rig) {
			refused := dialService(t, r.fam, r.a.Addr(), r.port)
			for range 2 {
				expectNoReply(t, refused, []byte("let me in"))
			}
			rejected := r.metrics.For(lbmetrics.ProtocolUDP).RejectedSourceRange
			eventually(t, "2 source-range drops", func() bool { return testutil.ToFloat64(rejected) == 2 })
			if a, b := r.countsA.Refused(), r.countsB.Refused(); !maps.Equal(a, map[string]uint64{lbmetrics.ReasonSourceRange: 2}) || b != nil {
				t.Errorf("refusals counted for route a %v, route b %v; want 2 source_range for a alone", a, b)
			}
			if r.echoA.datagrams() != 0 {
				t.Errorf("the refused route's endpoint got %d datagrams", r.echoA.datagrams())
			}
			// The other route admits the same client.
			if got := roundTrip(t, dialService(t, r.fam, r.b.Addr(), r.port), []byte("hi")); string(got) != "hi" {
				t.Fatalf("reply %q", got)
			}
		}},
		{name: "each route counts its own flows, bytes and refusals", check: func(t *testing.T, r rig) {
			toA, toB := dialService(t, r.fam, r.a.Addr(), r.port), dialService(t, r.fam, r.b.Addr(), r.port)
			for _, payload := range []string{"one", "three"} {
				roundTrip(t, toA, []byte(payload))
			}
			roundTrip(t, toB, []byte("b"))
			// Route b loses its endpoints: a new client is refused there.
			r.routes.mu.Lock()
			r.routes.routes[r.b] = &Route{Name: "b", Picker: &fakePicker{}, Metrics: r.routes.routes[r.b].Metrics}
			r.routes.mu.Unlock()
			expectNoReply(t, dialService(t, r.fam, r.b.Addr(), r.port), []byte("anyone?"))
			for _, want := range []struct {
				route   string
				counts  *lbmetrics.PortCounters
				bytes   uint64
				refused map[string]uint64
			}{
				{route: "a", counts: r.countsA, bytes: 8},
				{route: "b", counts: r.countsB, bytes: 1, refused: map[string]uint64{lbmetrics.ReasonNoEndpoints: 1}},
			} {
				c := want.counts
				// A reply is counted once sent, which may be after the
				// client read it.
				eventually(t, "route "+want.route+"'s counters", func() bool {
					return c.BytesToClient.Load() == want.bytes && maps.Equal(c.Refused(), want.refused)
				})
				if c.Flows.Load() != 1 || c.Active.Load() != 1 || c.BytesToEndpoint.Load() != want.bytes || c.DialFailures.Load() != 0 {
					t.Errorf("route %s: flows %d, active %d, bytes to endpoint %d, dial failures %d; want 1, 1, %d, 0",
						want.route, c.Flows.Load(), c.Active.Load(), c.BytesToEndpoint.Load(), c.DialFailures.Load(), want.bytes)
				}
			}
			// The node-wide series are the routes' sum.
			udp := r.metrics.For(lbmetrics.ProtocolUDP)
			for _, total := range []struct {
				name string
				got  float64
				want float64
			}{
				{"flows total", testutil.ToFloat64(r.metrics.UDPFlowsTotal), 2},
				{"flows active", testutil.ToFloat64(r.metrics.UDPFlowsActive), 2},
				{"bytes to endpoint", testutil.ToFloat64(udp.BytesToEndpoint), 9},
				{"bytes to client", testutil.ToFloat64(udp.BytesToClient), 9},
				{"no endpoints", testutil.ToFloat64(udp.RejectedNoEndpoints), 1},
			} {
				if total.got != total.want {
					t.Errorf("node-wide %s = %v, want %v", total.name, total.got, total.want)
				}
			}
			// A closed flow leaves its own route's gauge.
			r.CloseRouteFlowsTo("a", netip.AddrPort{})
			eventually(t, "route a's flow closed", func() bool { return r.countsA.Active.Load() == 0 })
			if got := r.countsB.Active.Load(); got != 1 {
				t.Errorf("route b's active flows after route a's closed: %d, want 1", got)
			}
		}},
		{name: "one client to two destinations is two flows", check: func(t *testing.T, r rig) {
			r.routes.mu.Lock()
			r.routes.routes[r.b] = echoRoute("b", r.echoA) // both to one endpoint
			r.routes.mu.Unlock()
			client, err := net.ListenUDP(r.fam.network, &net.UDPAddr{IP: net.ParseIP(r.fam.loopback)})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			for round := range 2 {
				for _, to := range []netip.AddrPort{r.a, r.b} {
					if _, err := client.WriteToUDPAddrPort([]byte(to.String()), to); err != nil {
						t.Fatal(err)
					}
					_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
					buf := make([]byte, 100)
					n, from, err := client.ReadFromUDPAddrPort(buf)
					if err != nil {
						t.Fatalf("round %d, to %v: %v", round, to, err)
					}
					if from.Addr().Unmap() != to.Addr() || from.Port() != to.Port() || string(buf[:n]) != to.String() {
						t.Fatalf("round %d: reply %q from %v, want %q from %v", round, buf[:n], from, to.String(), to)
					}
				}
			}
			if got := r.FlowCount(); got != 2 {
				t.Errorf("FlowCount = %d, want 2", got)
			}
			if got := r.echoA.distinctSources(); got != 2 {
				t.Errorf("the endpoint saw %d flow sockets, want 2", got)
			}
		}},
		{name: "CloseRouteFlowsTo closes only that route's flows", check: func(t *testing.T, r rig) {
			r.routes.mu.Lock()
			r.routes.routes[r.b] = echoRoute("b", r.echoA)
			r.routes.mu.Unlock()
			toA, toB := dialService(t, r.fam, r.a.Addr(), r.port), dialService(t, r.fam, r.b.Addr(), r.port)
			roundTrip(t, toA, []byte("1"))
			roundTrip(t, toB, []byte("1"))
			r.CloseRouteFlowsTo("a", r.echoA.addr())
			eventually(t, "route a's flow to close", func() bool { return r.FlowCount() == 1 })
			roundTrip(t, toB, []byte("2"))
			if got := r.echoA.distinctSources(); got != 2 {
				t.Errorf("route b's flow was replaced: the endpoint saw %d flow sockets, want 2", got)
			}
			roundTrip(t, toA, []byte("2"))
			if got := r.echoA.distinctSources(); got != 3 {
				t.Errorf("route a's flow was not replaced: the endpoint saw %d flow sockets, want 3", got)
			}
			r.CloseRouteFlowsTo("b", netip.AddrPort{}) // the route went away
			eventually(t, "route b's flows to close", func() bool { return r.FlowCount() == 1 })
		}},
		{name: "9000-byte datagrams round trip", check: func(t *testing.T, r rig) {
			client := dialService(t, r.fam, r.a.Addr(), r.port)
			payload := make([]byte, 9000)
			_, _ = rand.Read(payload)
			if got := roundTrip(t, client, payload); !bytes.Equal(got, payload) {
				t.Fatalf("got %d bytes back, not the %d sent", len(got), len(payload))
			}
		}},
	}
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					r := rig{fam: fam, echoA: startEcho(t, fam.network, net.JoinHostPort(fam.loopback, "0")),
						echoB: startEcho(t, fam.network, net.JoinHostPort(fam.loopback, "0"))}
					r.sharedRig = startShared(t, fam, fam.wildcard, replies, map[netip.AddrPort]*Route{})
					r.a, r.b = netip.AddrPortFrom(fam.a, r.port), netip.AddrPortFrom(fam.b, r.port)
					r.countsA, r.countsB = &lbmetrics.PortCounters{}, &lbmetrics.PortCounters{}
					routeA, routeB := echoRoute("a", r.echoA), echoRoute("b", r.echoB)
					routeA.Admit = c.admit
					routeA.Metrics = r.metrics.WithPort(lbmetrics.ProtocolUDP, r.countsA)
					routeB.Metrics = r.metrics.WithPort(lbmetrics.ProtocolUDP, r.countsB)
					r.routes.mu.Lock()
					r.routes.routes[r.a], r.routes.routes[r.b] = routeA, routeB
					r.routes.mu.Unlock()
					c.check(t, r)
				})
			}
			t.Run("the socket's own address is dropped", func(t *testing.T) {
				echo := startEcho(t, fam.network, net.JoinHostPort(fam.loopback, "0"))
				r := startShared(t, fam, net.JoinHostPort(fam.loopback, "0"), replies, nil)
				r.routes.mu.Lock()
				r.routes.routes = map[netip.AddrPort]*Route{r.Addr(): echoRoute("own", echo)} // a wrong table
				r.routes.mu.Unlock()
				client := dialService(t, fam, r.Addr().Addr(), r.port)
				expectNoReply(t, client, []byte("direct"))
				direct := r.metrics.For(lbmetrics.ProtocolUDP).RejectedDirect
				eventually(t, "the drop counted", func() bool { return testutil.ToFloat64(direct) == 1 })
				if echo.datagrams() != 0 {
					t.Errorf("the endpoint got %d datagrams", echo.datagrams())
				}
			})
		})
	}
}

func TestSharedSocketNeedsReplies(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	routes := func(netip.AddrPort) (*Route, bool) { return nil, false }
	if _, err := New(Config{Conn: conn, Routes: routes}); err == nil {
		t.Fatal("New accepted Routes without Replies")
	}
}
