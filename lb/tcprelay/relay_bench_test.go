package tcprelay

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/selfdial"
)

// The benchmarks compare, in one run and through the same REDIRECT portal:
// kproxy's relay (read/write, then splice once a direction has moved 64 KiB
// in full reads), the same relay forced to read/write only and to splice
// only, a plain io.Copy relay (what a naive Go proxy does; on Linux io.Copy
// between TCP sockets splices too), and a direct connection to the backend.
// Client, relays and backend share the process and the machine's cores, so
// absolute numbers understate a real deployment, and the in-process client
// competes with the loops for the same Ps; the ratios are the point. The
// data-plane benchmark (bench/dataplane) measures the relay in the lab.
//
// Run: sudo go test -run '^$' -bench . ./lb/tcprelay

type benchVariant struct {
	name string
	addr netip.AddrPort
}

// benchSetup starts a backend running handler and every variant in front of
// it, each behind its own portal.
func benchSetup(b *testing.B, handler func(*net.TCPConn)) []benchVariant {
	b.Helper()
	setupNamespace(b)
	backend := serve(b, handler)
	variants := []benchVariant{{name: "direct", addr: backend}}
	for _, v := range []struct {
		name        string
		spliceAfter int64
		// guarded: with the loop check and the service-port bound, as
		// the userspace mode runs the relays.
		guarded bool
	}{{"kproxy", 0, true}, {"unguarded", 0, false}, {"rw-only", -1, true}, {"splice-only", 1, true}} {
		cfg := Config{Picker: newPicker(backend), SpliceAfter: v.spliceAfter}
		if v.guarded {
			port, err := fdbudget.NewPort(fdbudget.PortLimitsFor(1 << 20))
			if err != nil {
				b.Fatal(err)
			}
			cfg.Dials, cfg.Port = selfdial.New(), port
		}
		tp := startProxy(b, cfg)
		svc := vip()
		portal(b, svc, tp.port)
		variants = append(variants, benchVariant{name: v.name, addr: svc})
	}
	svc := vip()
	portal(b, svc, ioCopyRelay(b, backend))
	return append(variants, benchVariant{name: "iocopy", addr: svc})
}

// ioCopyRelay is the reference: a straightforward Go relay with io.Copy in
// each direction and half-close, no open-relay check.
func ioCopyRelay(b *testing.B, backend netip.AddrPort) uint16 {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4zero})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(backend))
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{})
				go func() { io.Copy(u, c); u.CloseWrite(); close(done) }()
				io.Copy(c, u)
				c.CloseWrite()
				<-done
			}()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func report(b *testing.B, results map[string]float64, unit string) {
	for name, v := range results {
		b.ReportMetric(v, name+"-"+unit)
	}
	if ref := results["iocopy"]; ref > 0 {
		b.ReportMetric(results["kproxy"]/ref, "kproxy/iocopy")
		b.ReportMetric(results["rw-only"]/ref, "rw-only/iocopy")
		b.ReportMetric(results["splice-only"]/ref, "splice-only/iocopy")
	}
}

// BenchmarkRelayBulk streams b.N MiB through each variant and waits for the
// backend to confirm it received everything.
func BenchmarkRelayBulk(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	variants := benchSetup(b, func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c)
		_ = binary.Write(c, binary.BigEndian, n)
	})
	chunk := make([]byte, 1<<20)
	results := map[string]float64{}
	b.ResetTimer()
	for _, v := range variants {
		c := dial(b, v.addr)
		start := time.Now()
		for range b.N {
			if _, err := c.Write(chunk); err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
		}
		_ = c.CloseWrite()
		var got int64
		if err := binary.Read(c, binary.BigEndian, &got); err != nil || got != int64(b.N)*int64(len(chunk)) {
			b.Fatalf("%s: backend confirmed %d bytes (%v), want %d", v.name, got, err, b.N*len(chunk))
		}
		results[v.name] = float64(b.N*len(chunk)) / time.Since(start).Seconds() / 1e6
		c.Close()
	}
	report(b, results, "MB/s")
}

// BenchmarkRelayPingPong sends b.N 1 KiB requests, each answered by a 1 KiB
// echo, over one keep-alive connection per variant.
func BenchmarkRelayPingPong(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	variants := benchSetup(b, echo)
	req, resp := make([]byte, 1024), make([]byte, 1024)
	results := map[string]float64{}
	b.ResetTimer()
	for _, v := range variants {
		c := dial(b, v.addr)
		start := time.Now()
		for range b.N {
			if _, err := c.Write(req); err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			if _, err := io.ReadFull(c, resp); err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
		}
		results[v.name] = float64(b.N) / time.Since(start).Seconds()
		c.Close()
	}
	report(b, results, "req/s")
}

// BenchmarkRelayConnect opens b.N connections per variant, each doing one
// 1-byte round trip before closing.
func BenchmarkRelayConnect(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	variants := benchSetup(b, echo)
	buf := make([]byte, 1)
	results := map[string]float64{}
	b.ResetTimer()
	for _, v := range variants {
		start := time.Now()
		for range b.N {
			connectRoundTrip(b, v.name, v.addr, buf)
		}
		results[v.name] = float64(b.N) / time.Since(start).Seconds()
	}
	report(b, results, "conn/s")
}

// BenchmarkRelayConnectShared opens b.N connections per variant, each doing
// one 1-byte round trip before closing, through listeners bound to the
// address the client dials (no portal rule): a listener of one service
// port, as local portals run today (local-portal), and a shared listener
// whose connections are routed by their local address, with one route and
// with 30,000 (a copy-on-write map behind an atomic pointer, as the
// userspace mode keeps them). The variants take turns connection by
// connection, so a change in the machine's load hits them alike.
func BenchmarkRelayConnectShared(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	backend := serve(b, echo)
	newPort := func() *fdbudget.Port {
		port, err := fdbudget.NewPort(fdbudget.PortLimitsFor(1 << 20))
		if err != nil {
			b.Fatal(err)
		}
		return port
	}
	loopback := netip.MustParseAddr("127.0.0.1")
	listen := func(ip net.IP) *net.TCPListener {
		ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: ip})
		if err != nil {
			b.Fatal(err)
		}
		return ln
	}

	plain := startProxyOn(b, listen(net.IPv4(127, 0, 0, 1)), Config{
		Picker: newPicker(backend), Direct: true, Dials: selfdial.New(), Port: newPort(),
	})
	variants := []benchVariant{{name: "local-portal", addr: netip.AddrPortFrom(loopback, plain.port)}}
	for _, n := range []int{1, 30000} {
		ln := listen(net.IPv4zero)
		served := netip.AddrPortFrom(loopback, uint16(ln.Addr().(*net.TCPAddr).Port))
		routes := make(map[netip.AddrPort]*Route, n)
		routes[served] = &Route{Name: "served", Picker: newPicker(backend), Port: newPort()}
		for i := 1; len(routes) < n; i++ {
			vip := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), uint16(80+i%7))
			routes[vip] = &Route{Name: vip.String(), Picker: newPicker(backend), Port: newPort()}
		}
		var table atomic.Pointer[map[netip.AddrPort]*Route]
		table.Store(&routes)
		startProxyOn(b, ln, Config{Direct: true, Dials: selfdial.New(), Routes: func(local netip.AddrPort) (*Route, bool) {
			r, ok := (*table.Load())[local]
			return r, ok
		}})
		variants = append(variants, benchVariant{name: fmt.Sprintf("shared-%d", n), addr: served})
	}

	buf := make([]byte, 1)
	took := make([]time.Duration, len(variants))
	b.ResetTimer()
	for range b.N {
		for i, v := range variants {
			start := time.Now()
			connectRoundTrip(b, v.name, v.addr, buf)
			took[i] += time.Since(start)
		}
	}
	rate := map[string]float64{}
	for i, v := range variants {
		rate[v.name] = float64(b.N) / took[i].Seconds()
		b.ReportMetric(rate[v.name], v.name+"-conn/s")
	}
	b.ReportMetric(rate["shared-30000"]/rate["local-portal"], "shared-30000/local-portal")
	b.ReportMetric(rate["shared-30000"]/rate["shared-1"], "shared-30000/shared-1")
}

// BenchmarkSharedRouteLookup measures what a shared listener adds to each
// new connection, apart from the relaying both kinds of listener do: the
// getsockname of the accepted socket and the route lookup, in a table of 1
// and of 30,000 routes.
func BenchmarkSharedRouteLookup(b *testing.B) {
	for _, n := range []int{1, 30000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4zero})
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			served := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(ln.Addr().(*net.TCPAddr).Port))
			routes := map[netip.AddrPort]*Route{served: {Name: "served"}}
			for i := 1; len(routes) < n; i++ {
				vip := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), uint16(80+i%7))
				routes[vip] = &Route{Name: vip.String()}
			}
			var table atomic.Pointer[map[netip.AddrPort]*Route]
			table.Store(&routes)
			p, err := New(Config{Listener: ln, Direct: true, Routes: func(local netip.AddrPort) (*Route, bool) {
				r, ok := (*table.Load())[local]
				return r, ok
			}})
			if err != nil {
				b.Fatal(err)
			}
			client, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(served))
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			accepted, err := ln.AcceptTCP()
			if err != nil {
				b.Fatal(err)
			}
			defer accepted.Close()
			raw, err := accepted.SyscallConn()
			if err != nil {
				b.Fatal(err)
			}
			peer := accepted.RemoteAddr().(*net.TCPAddr).AddrPort()
			b.ResetTimer()
			_ = raw.Control(func(fd uintptr) {
				for range b.N {
					if _, r, ok := p.routeOf(int(fd), peer); !ok || r.Name != "served" {
						b.Fatalf("route of %v = %v, %v", served, r, ok)
					}
				}
			})
		})
	}
}

// connectRoundTrip opens a connection to addr, sends buf and reads as much
// back, and closes it: one new connection's work.
func connectRoundTrip(b *testing.B, name string, addr netip.AddrPort, buf []byte) {
	b.Helper()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(addr))
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	defer c.Close()
	if _, err := c.Write(buf); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
}
