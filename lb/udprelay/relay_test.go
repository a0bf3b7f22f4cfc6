package udprelay

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/selfdial"
)

// fakePicker round-robins over its endpoints and records what the relay
// reports back.
type fakePicker struct {
	mu        sync.Mutex
	endpoints []netip.AddrPort
	next      int
	picked    []netip.Addr
	connected []netip.AddrPort
	failed    []netip.AddrPort
}

func (p *fakePicker) Pick(client netip.Addr) []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.picked = append(p.picked, client)
	if len(p.endpoints) == 0 {
		return nil
	}
	out := make([]netip.AddrPort, 0, len(p.endpoints))
	for i := range p.endpoints {
		out = append(out, p.endpoints[(p.next+i)%len(p.endpoints)])
	}
	p.next++
	return out
}

func (p *fakePicker) Connected(_ netip.Addr, ep netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connected = append(p.connected, ep)
}

func (p *fakePicker) Failed(_ netip.Addr, ep netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = append(p.failed, ep)
}

func (p *fakePicker) snapshot() (picked []netip.Addr, connected, failed []netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]netip.Addr(nil), p.picked...), append([]netip.AddrPort(nil), p.connected...),
		append([]netip.AddrPort(nil), p.failed...)
}

// echoServer returns every datagram to its sender and remembers the senders.
type echoServer struct {
	conn    *net.UDPConn
	mu      sync.Mutex
	sources map[netip.AddrPort]int
}

func startEcho(t testing.TB, network, addr string) *echoServer {
	t.Helper()
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatalf("echo server: %v", err)
	}
	_ = conn.SetReadBuffer(4 << 20)
	s := &echoServer{conn: conn, sources: map[netip.AddrPort]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, BufferSize)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.sources[from]++
			s.mu.Unlock()
			_, _ = conn.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return s
}

func (s *echoServer) addr() netip.AddrPort { return s.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (s *echoServer) datagrams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for _, n := range s.sources {
		total += n
	}
	return total
}

func (s *echoServer) distinctSources() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sources)
}

type testRelay struct {
	*Relay
	metrics *lbmetrics.Metrics
}

func startRelay(t testing.TB, cfg Config) testRelay {
	t.Helper()
	if cfg.Conn == nil {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatalf("proxy socket: %v", err)
		}
		cfg.Conn = conn
	}
	m, err := lbmetrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	if cfg.Name == "" {
		cfg.Name = "test/udp:dns/UDP"
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- r.Serve(context.Background()) }()
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return testRelay{Relay: r, metrics: m}
}

func dialClient(t testing.TB, to netip.AddrPort) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends payload and waits for the echo. The deadline only keeps a
// broken relay from hanging the test; it asserts nothing about speed.
func roundTrip(t testing.TB, c *net.UDPConn, payload []byte) []byte {
	t.Helper()
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("client write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, BufferSize+1)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("client read: %v", err)
	}
	return buf[:n]
}

// eventually polls cond until it holds or a generous deadline passes.
// expiringFlow is the idle timeout of the cases that wait for a flow to
// expire: long enough that a busy machine's echo still finds its flow, short
// enough that waiting for the expiry costs little.
const expiringFlow = 500 * time.Millisecond

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEchoRoundTrip(t *testing.T) {
	echo := startEcho(t, "udp", "127.0.0.1:0")
	picker := &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}
	r := startRelay(t, Config{Picker: picker, IdleTimeout: time.Hour})

	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteToUDPAddrPort([]byte("hello"), r.Addr()); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("read reply: %v", err)
	}
	if got := string(buf[:n]); got != "hello" {
		t.Errorf("reply = %q, want %q", got, "hello")
	}
	if from != r.Addr() {
		t.Errorf("reply came from %v, want the proxy socket %v", from, r.Addr())
	}
	if _, err := c.WriteToUDPAddrPort([]byte("again"), r.Addr()); err != nil {
		t.Fatal(err)
	}
	if n, _, err = c.ReadFromUDPAddrPort(buf); err != nil || string(buf[:n]) != "again" {
		t.Fatalf("second reply = %q, %v", buf[:n], err)
	}

	client := c.LocalAddr().(*net.UDPAddr).AddrPort()
	picked, connected, failed := picker.snapshot()
	if len(picked) != 1 || picked[0] != client.Addr() {
		t.Errorf("Pick calls = %v, want one for %v (both datagrams share a flow)", picked, client.Addr())
	}
	if len(connected) != 1 || connected[0] != echo.addr() || len(failed) != 0 {
		t.Errorf("Connected = %v, Failed = %v; want Connected(%v) only", connected, failed, echo.addr())
	}
	if got := r.FlowCount(); got != 1 {
		t.Errorf("FlowCount = %d, want 1", got)
	}
	udp := r.metrics.For(lbmetrics.ProtocolUDP)
	// The relay counts reply bytes right after sendmmsg returns, which may
	// be after the client already has the reply.
	eventually(t, "reply bytes to be counted", func() bool { return testutil.ToFloat64(udp.BytesToClient) >= 10 })
	for _, c := range []struct {
		name string
		got  prometheus.Collector
		want float64
	}{
		{"bytes to endpoint", udp.BytesToEndpoint, 10},
		{"bytes to client", udp.BytesToClient, 10},
		{"flows total", r.metrics.UDPFlowsTotal, 1},
		{"flows active", r.metrics.UDPFlowsActive, 1},
	} {
		if got := testutil.ToFloat64(c.got); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestManyClientsGetOneFlowEach(t *testing.T) {
	const clients = 40
	echo := startEcho(t, "udp", "127.0.0.1:0")
	r := startRelay(t, Config{Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}, IdleTimeout: time.Hour})

	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		c := dialClient(t, r.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 3 {
				msg := []byte{byte(i), byte(j)}
				if _, err := c.Write(msg); err != nil {
					errs <- err
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 16)
				n, err := c.Read(buf)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf[:n], msg) {
					errs <- errors.New("client got another client's reply")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := r.FlowCount(); got != clients {
		t.Errorf("FlowCount = %d, want %d", got, clients)
	}
	if got := echo.distinctSources(); got != clients {
		t.Errorf("endpoint saw %d source addresses, want one per client (%d)", got, clients)
	}
	if got := testutil.ToFloat64(r.metrics.UDPFlowsTotal); got != clients {
		t.Errorf("flows total = %v, want %d", got, clients)
	}
}

func TestIdleFlowsExpire(t *testing.T) {
	echo := startEcho(t, "udp", "127.0.0.1:0")
	r := startRelay(t, Config{Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}, IdleTimeout: expiringFlow})
	c := dialClient(t, r.Addr())

	roundTrip(t, c, []byte("x"))
	eventually(t, "the idle flow to expire", func() bool { return r.FlowCount() == 0 })
	if got := testutil.ToFloat64(r.metrics.UDPFlowsActive); got != 0 {
		t.Errorf("flows active = %v after expiry, want 0", got)
	}
	if got := testutil.ToFloat64(r.metrics.UDPFlowEvictionsTotal); got != 0 {
		t.Errorf("evictions = %v, want 0: expiry is not eviction", got)
	}
	roundTrip(t, c, []byte("y"))
	if got := testutil.ToFloat64(r.metrics.UDPFlowsTotal); got != 2 {
		t.Errorf("flows total = %v, want 2 (a new flow after expiry)", got)
	}
}

func TestFlowBoundEvictsLeastRecentlyActive(t *testing.T) {
	echo := startEcho(t, "udp", "127.0.0.1:0")
	r := startRelay(t, Config{Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}, IdleTimeout: time.Hour, MaxFlows: 3})

	clients := make([]*net.UDPConn, 5)
	for i := range clients {
		clients[i] = dialClient(t, r.Addr())
	}
	roundTrip(t, clients[0], []byte("0"))
	roundTrip(t, clients[1], []byte("1"))
	roundTrip(t, clients[2], []byte("2"))
	roundTrip(t, clients[0], []byte("0 again")) // client 1 is now the least recently active
	roundTrip(t, clients[3], []byte("3"))       // evicts client 1
	roundTrip(t, clients[4], []byte("4"))       // evicts client 2

	if got := r.FlowCount(); got != 3 {
		t.Errorf("FlowCount = %d, want the bound 3", got)
	}
	if got := testutil.ToFloat64(r.metrics.UDPFlowEvictionsTotal); got != 2 {
		t.Errorf("evictions = %v, want 2", got)
	}
	total := testutil.ToFloat64(r.metrics.UDPFlowsTotal)
	roundTrip(t, clients[0], []byte("0 kept"))
	if got := testutil.ToFloat64(r.metrics.UDPFlowsTotal); got != total {
		t.Errorf("client 0 got a new flow (total %v → %v); its recent flow should have survived", total, got)
	}
	roundTrip(t, clients[1], []byte("1 evicted"))
	if got := testutil.ToFloat64(r.metrics.UDPFlowsTotal); got != total+1 {
		t.Errorf("flows total = %v, want %v: client 1's flow was evicted and must be recreated", got, total+1)
	}
}

func TestLargestDatagramsPassWhole(t *testing.T) {
	for _, tc := range []struct {
		name, network, echo, proxy string
		size                       int
	}{
		{"ipv4", "udp4", "127.0.0.1:0", "127.0.0.1:0", 65507},
		{"ipv6", "udp6", "[::1]:0", "[::1]:0", 65527},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo := startEcho(t, tc.network, tc.echo)
			proxy, err := net.ListenUDP(tc.network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(tc.proxy)))
			if err != nil {
				t.Skipf("no %s loopback: %v", tc.network, err)
			}
			r := startRelay(t, Config{Conn: proxy, Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}, IdleTimeout: time.Hour})
			c := dialClient(t, r.Addr())
			_ = c.SetReadBuffer(1 << 20)
			payload := make([]byte, tc.size)
			_, _ = rand.Read(payload)
			got := roundTrip(t, c, payload)
			if !bytes.Equal(got, payload) {
				t.Fatalf("got %d bytes back, want the %d-byte datagram unchanged", len(got), len(payload))
			}
		})
	}
}

func TestMixedFamiliesAndMappedClients(t *testing.T) {
	// A dual-stack proxy socket sees IPv4 clients as ::ffff:a.b.c.d; the
	// picker must get the plain IPv4 address and replies must still reach
	// the client.
	proxy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified})
	if err != nil {
		t.Skipf("no dual-stack socket: %v", err)
	}
	echo := startEcho(t, "udp4", "127.0.0.1:0")
	picker := &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}
	r := startRelay(t, Config{Conn: proxy, Picker: picker, IdleTimeout: time.Hour})
	c := dialClient(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), r.Addr().Port()))
	if got := roundTrip(t, c, []byte("mapped")); string(got) != "mapped" {
		t.Fatalf("reply = %q", got)
	}
	picked, _, _ := picker.snapshot()
	if want := netip.MustParseAddr("127.0.0.1"); len(picked) != 1 || picked[0] != want {
		t.Errorf("picker saw clients %v, want [%v]", picked, want)
	}
}

func TestNewFlowPicksAgainAfterExpiry(t *testing.T) {
	a, b := startEcho(t, "udp", "127.0.0.1:0"), startEcho(t, "udp", "127.0.0.1:0")
	picker := &fakePicker{endpoints: []netip.AddrPort{a.addr(), b.addr()}}
	r := startRelay(t, Config{Picker: picker, IdleTimeout: expiringFlow})
	c := dialClient(t, r.Addr())

	roundTrip(t, c, []byte("first"))
	eventually(t, "the flow to expire", func() bool { return r.FlowCount() == 0 })
	roundTrip(t, c, []byte("second"))
	if a.datagrams() != 1 || b.datagrams() != 1 {
		t.Errorf("endpoint A got %d datagrams and B %d; want one each (the second flow picks again)", a.datagrams(), b.datagrams())
	}
}

func TestSetPickerAffectsNewFlowsOnly(t *testing.T) {
	a, b := startEcho(t, "udp", "127.0.0.1:0"), startEcho(t, "udp", "127.0.0.1:0")
	r := startRelay(t, Config{Picker: &fakePicker{endpoints: []netip.AddrPort{a.addr()}}, IdleTimeout: time.Hour})
	old, fresh := dialClient(t, r.Addr()), dialClient(t, r.Addr())
	roundTrip(t, old, []byte("1"))
	r.SetPicker(&fakePicker{endpoints: []netip.AddrPort{b.addr()}})
	roundTrip(t, old, []byte("2"))
	roundTrip(t, fresh, []byte("3"))
	if a.datagrams() != 2 || b.datagrams() != 1 {
		t.Errorf("A got %d, B got %d; want the existing flow kept on A (2) and the new one on B (1)", a.datagrams(), b.datagrams())
	}
	r.CloseFlowsTo(a.addr())
	eventually(t, "the flow to the removed endpoint to close", func() bool { return r.FlowCount() == 1 })
	roundTrip(t, old, []byte("4"))
	if a.datagrams() != 2 || b.datagrams() != 2 {
		t.Errorf("after CloseFlowsTo(A): A got %d, B got %d; want 2 and 2", a.datagrams(), b.datagrams())
	}
}

func TestNoEndpointsDropsAndCounts(t *testing.T) {
	picker := &fakePicker{}
	r := startRelay(t, Config{Picker: picker, IdleTimeout: time.Hour})
	c := dialClient(t, r.Addr())
	for range 3 {
		if _, err := c.Write([]byte("anyone?")); err != nil {
			t.Fatal(err)
		}
	}
	rejected := r.metrics.For(lbmetrics.ProtocolUDP).RejectedNoEndpoints
	eventually(t, "3 rejections", func() bool { return testutil.ToFloat64(rejected) == 3 })
	if got := r.FlowCount(); got != 0 {
		t.Errorf("FlowCount = %d, want 0", got)
	}
	if got := testutil.ToFloat64(r.metrics.UDPFlowsTotal); got != 0 {
		t.Errorf("flows total = %v, want 0", got)
	}
}

func TestRefusingEndpointClosesFlow(t *testing.T) {
	// A port nobody listens on: the kernel answers with ICMP port
	// unreachable, which the connected upstream socket reports as
	// ECONNREFUSED.
	closed, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dead := closed.LocalAddr().(*net.UDPAddr).AddrPort()
	closed.Close()
	echo := startEcho(t, "udp", "127.0.0.1:0")
	picker := &fakePicker{endpoints: []netip.AddrPort{dead, echo.addr()}}
	r := startRelay(t, Config{Picker: picker, IdleTimeout: time.Hour})
	c := dialClient(t, r.Addr())

	if _, err := c.Write([]byte("to the dead endpoint")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refused flow to close", func() bool {
		_, _, failed := picker.snapshot()
		return len(failed) == 1 && r.FlowCount() == 0
	})
	_, _, failed := picker.snapshot()
	if failed[0] != dead {
		t.Errorf("Failed reported %v, want %v", failed[0], dead)
	}
	if got := testutil.ToFloat64(r.metrics.For(lbmetrics.ProtocolUDP).DialFailures); got != 1 {
		t.Errorf("dial failures = %v, want 1", got)
	}
	if got := roundTrip(t, c, []byte("retry")); string(got) != "retry" {
		t.Errorf("reply after re-pick = %q", got)
	}
	if echo.datagrams() != 1 {
		t.Errorf("live endpoint got %d datagrams, want 1", echo.datagrams())
	}
}

func TestServeStopsOnContextCancel(t *testing.T) {
	echo := startEcho(t, "udp", "127.0.0.1:0")
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m := lbmetrics.Discard()
	r, err := New(Config{Conn: conn, Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}, Metrics: m, IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- r.Serve(ctx) }()
	roundTrip(t, dialClient(t, r.Addr()), []byte("x"))
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}
	if got := r.FlowCount(); got != 0 {
		t.Errorf("FlowCount after stop = %d, want 0 (flows closed)", got)
	}
	if got := testutil.ToFloat64(m.UDPFlowsActive); got != 0 {
		t.Errorf("flows active after stop = %v, want 0", got)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := r.Serve(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve after Close = %v, want net.ErrClosed", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	picker := &fakePicker{}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no socket", Config{Picker: picker}},
		{"no picker", Config{Conn: conn}},
		{"negative timeout", Config{Conn: conn, Picker: picker, IdleTimeout: -time.Second}},
		{"negative bound", Config{Conn: conn, Picker: picker, MaxFlows: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := New(tc.cfg); err == nil {
				r.Close()
				t.Fatal("New accepted a bad config")
			}
		})
	}
}

func TestAdmitDropsClientsOutsideTheRanges(t *testing.T) {
	for _, tc := range []struct {
		name      string
		admit     func(netip.Addr) bool
		wantFlows int
	}{
		{name: "no ranges", admit: nil, wantFlows: 1},
		{name: "client inside", admit: func(a netip.Addr) bool { return a.IsLoopback() }, wantFlows: 1},
		{name: "client outside", admit: func(netip.Addr) bool { return false }, wantFlows: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo := startEcho(t, "udp4", "127.0.0.1:0")
			r := startRelay(t, Config{Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}, IdleTimeout: time.Hour, Admit: tc.admit})
			c := dialClient(t, r.Addr())
			if tc.wantFlows == 1 {
				if got := roundTrip(t, c, []byte("hello")); string(got) != "hello" {
					t.Fatalf("reply = %q, want hello", got)
				}
			} else {
				for range 3 {
					if _, err := c.Write([]byte("let me in")); err != nil {
						t.Fatal(err)
					}
				}
				rejected := r.metrics.For(lbmetrics.ProtocolUDP).RejectedSourceRange
				eventually(t, "3 source-range drops", func() bool { return testutil.ToFloat64(rejected) == 3 })
				if n := echo.datagrams(); n != 0 {
					t.Errorf("the endpoint got %d datagrams from a client outside the ranges", n)
				}
			}
			if got := r.FlowCount(); got != tc.wantFlows {
				t.Errorf("FlowCount = %d, want %d", got, tc.wantFlows)
			}
		})
	}
}

// dialClientFrom is dialClient from a chosen loopback address, so tests can
// play several client hosts.
func dialClientFrom(t testing.TB, from string, to netip.AddrPort) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(from)}, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatalf("client from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expectNoReply sends payload and checks nothing comes back within a short
// wait (a dropped datagram has no other symptom).
func expectNoReply(t testing.TB, c *net.UDPConn, payload []byte) {
	t.Helper()
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("client write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Fatalf("got a reply %q, want the datagram dropped", payload[:min(n, len(payload))])
	}
}

func TestDescriptorBudget(t *testing.T) {
	type send struct {
		from   string // loopback client address
		port   int    // which of that address's client sockets
		answer bool
	}
	tests := []struct {
		name             string
		total, perClient int
		sends            []send
		wantRefused      float64
		wantEvicted      float64
		wantFlows        int
		wantCreated      float64
	}{
		// 127.0.0.2's flow is the oldest of all: the newcomer's own
		// oldest goes instead, so 127.0.0.2 keeps its flow (its second
		// datagram creates none).
		{"a client at its share gives up its own least recently active flow", 10, 2,
			[]send{{"127.0.0.2", 0, true}, {"127.0.0.1", 0, true}, {"127.0.0.1", 1, true}, {"127.0.0.1", 2, true}, {"127.0.0.2", 0, true}},
			0, 1, 3, 4},
		// Touched again, 127.0.0.1's first flow is not its oldest any more.
		{"a client's order follows its activity", 10, 2,
			[]send{{"127.0.0.1", 0, true}, {"127.0.0.1", 1, true}, {"127.0.0.1", 0, true}, {"127.0.0.1", 2, true}, {"127.0.0.1", 0, true}},
			0, 1, 2, 3},
		{"flows' share used up: the least recently active flow makes room", 2, 2,
			[]send{{"127.0.0.1", 0, true}, {"127.0.0.2", 0, true}, {"127.0.0.3", 0, true}},
			0, 1, 2, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			budget, err := fdbudget.New(tc.total, tc.perClient)
			if err != nil {
				t.Fatal(err)
			}
			echo := startEcho(t, "udp", "127.0.0.1:0")
			r := startRelay(t, Config{Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}, IdleTimeout: time.Hour, Descriptors: budget})
			clients := map[send]*net.UDPConn{}
			for i, s := range tc.sends {
				key := send{from: s.from, port: s.port}
				if clients[key] == nil {
					clients[key] = dialClientFrom(t, s.from, r.Addr())
				}
				payload := []byte{byte('a' + i)}
				if s.answer {
					if got := roundTrip(t, clients[key], payload); !bytes.Equal(got, payload) {
						t.Errorf("send %d: echo %q, want %q", i, got, payload)
					}
				} else {
					expectNoReply(t, clients[key], payload)
				}
			}
			refused := r.metrics.For(lbmetrics.ProtocolUDP).Rejected(lbmetrics.ReasonFDExhausted)
			if got := testutil.ToFloat64(refused); got != tc.wantRefused {
				t.Errorf("refused for descriptors = %v, want %v", got, tc.wantRefused)
			}
			if got := testutil.ToFloat64(r.metrics.UDPFlowEvictionsTotal); got != tc.wantEvicted {
				t.Errorf("evictions = %v, want %v", got, tc.wantEvicted)
			}
			if got := r.FlowCount(); got != tc.wantFlows {
				t.Errorf("FlowCount = %d, want %d", got, tc.wantFlows)
			}
			if got := testutil.ToFloat64(r.metrics.UDPFlowsTotal); got != tc.wantCreated {
				t.Errorf("flows created = %v, want %v", got, tc.wantCreated)
			}
			if held, _ := budget.Held(netip.Addr{}); held != tc.wantFlows {
				t.Errorf("budget holds %d descriptors, want one per flow (%d)", held, tc.wantFlows)
			}
		})
	}
}

func TestDescriptorBudgetSharedAndReleased(t *testing.T) {
	budget, err := fdbudget.New(100, 1)
	if err != nil {
		t.Fatal(err)
	}
	echo := startEcho(t, "udp", "127.0.0.1:0")
	picker := &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}
	r1 := startRelay(t, Config{Picker: picker, IdleTimeout: 100 * time.Millisecond, Descriptors: budget})
	r2 := startRelay(t, Config{Picker: picker, IdleTimeout: 100 * time.Millisecond, Descriptors: budget})
	roundTrip(t, dialClientFrom(t, "127.0.0.1", r1.Addr()), []byte("first"))
	// The client's one descriptor is held through r1: r2 must refuse it.
	c2 := dialClientFrom(t, "127.0.0.1", r2.Addr())
	expectNoReply(t, c2, []byte("second"))
	eventually(t, "the flow to expire and give its descriptor back", func() bool {
		held, _ := budget.Held(netip.Addr{})
		return r1.FlowCount() == 0 && held == 0
	})
	roundTrip(t, c2, []byte("after expiry"))
}

func TestIdleRelayHoldsNoBuffers(t *testing.T) {
	echo := startEcho(t, "udp", "127.0.0.1:0")
	r := startRelay(t, Config{Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}, IdleTimeout: 100 * time.Millisecond})
	if r.HoldsBuffers() {
		t.Fatal("a relay that has seen no datagram holds buffers")
	}
	roundTrip(t, dialClient(t, r.Addr()), []byte("x"))
	if !r.HoldsBuffers() {
		t.Fatal("a relay with a flow holds no buffers")
	}
	eventually(t, "the idle relay to give its buffers back", func() bool { return !r.HoldsBuffers() })
	roundTrip(t, dialClient(t, r.Addr()), []byte("again"))
}

// TestIdleRelaysCostLittleMemory starts many relays and checks the heap
// grows by far less than the two megabytes of buffers each used to
// allocate up front.
func TestIdleRelaysCostLittleMemory(t *testing.T) {
	const relays = 200
	picker := &fakePicker{endpoints: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range relays {
		startRelay(t, Config{Picker: picker})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perRelay := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / relays
	t.Logf("heap per idle relay: %d bytes", perRelay)
	if perRelay > 64<<10 {
		t.Errorf("an idle relay costs %d bytes of heap, want under 64 KiB", perRelay)
	}
}

// TestLoopsAreDropped: a relay whose endpoint is its own socket gets its
// flow's datagram back; it is dropped and counted as a loop instead of
// starting another flow, and so on until the descriptor budget is spent.
// The client's own flow is the only one, and it is forgotten with its
// socket.
func TestLoopsAreDropped(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	self := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	dials := selfdial.New()
	r := startRelay(t, Config{Conn: conn, Picker: &fakePicker{endpoints: []netip.AddrPort{self}}, IdleTimeout: time.Hour, Dials: dials})
	c := dialClient(t, self)
	for range 3 {
		if _, err := c.Write([]byte("round and round")); err != nil {
			t.Fatal(err)
		}
	}
	loops := r.metrics.For(lbmetrics.ProtocolUDP).RejectedLoop
	eventually(t, "3 loop drops", func() bool { return testutil.ToFloat64(loops) == 3 })
	if got := r.FlowCount(); got != 1 {
		t.Errorf("FlowCount = %d, want 1 (the client's)", got)
	}
	if got := dials.Len(); got != 1 {
		t.Errorf("%d flows in the relays' dials, want 1", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the flow forgotten with its socket", func() bool { return dials.Len() == 0 })
}
