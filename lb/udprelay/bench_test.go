package udprelay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/rawudp"
)

// naiveRelay is the reference a goroutine-per-flow Go relay gives (the shape
// of kube-proxy's removed userspace proxier): ReadFrom on the proxy socket,
// a map of flows, one goroutine per flow copying replies back with WriteTo.
type naiveRelay struct {
	conn     *net.UDPConn
	endpoint netip.AddrPort
	mu       sync.Mutex
	flows    map[netip.AddrPort]*net.UDPConn
}

func (n *naiveRelay) serve() {
	buf := make([]byte, BufferSize)
	for {
		size, client, err := n.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		n.mu.Lock()
		up := n.flows[client]
		if up == nil {
			if up, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(n.endpoint)); err != nil {
				n.mu.Unlock()
				continue
			}
			n.flows[client] = up
			go n.replies(up, client)
		}
		n.mu.Unlock()
		_, _ = up.Write(buf[:size])
	}
}

func (n *naiveRelay) replies(up *net.UDPConn, client netip.AddrPort) {
	buf := make([]byte, BufferSize)
	for {
		size, err := up.Read(buf)
		if err != nil {
			return
		}
		_, _ = n.conn.WriteToUDPAddrPort(buf[:size], client)
	}
}

func (n *naiveRelay) close() {
	n.conn.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, up := range n.flows {
		up.Close()
	}
}

// requestResponse runs b.N 64-byte round trips to target over flows
// concurrent client sockets, each waiting for its reply before the next
// request, and reports round trips per second.
func requestResponse(b *testing.B, target netip.AddrPort, flows int) float64 {
	rate, _ := requestResponseTo(b, []netip.AddrPort{target}, flows)
	return rate
}

// requestResponseTo is requestResponse with the client sockets spread
// over targets; it also returns the process's CPU µs per round trip.
func requestResponseTo(b *testing.B, targets []netip.AddrPort, flows int) (rate, cpu float64) {
	b.Helper()
	conns := make([]*net.UDPConn, flows)
	for i := range conns {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(targets[i%len(targets)]))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	// Warm up: create every flow outside the timed loop.
	for _, c := range conns {
		for {
			_, _ = c.Write(make([]byte, 64))
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := c.Read(make([]byte, 128)); err == nil {
				break
			}
		}
	}
	b.ResetTimer()
	start, start0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	for i, c := range conns {
		n := b.N / flows
		if i < b.N%flows {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := make([]byte, 64), make([]byte, 128)
			for range n {
				for {
					if _, err := c.Write(req); err != nil {
						b.Error(err)
						return
					}
					// A lost datagram is resent; the deadline only
					// detects the loss.
					_ = c.SetReadDeadline(time.Now().Add(time.Second))
					if _, err := c.Read(resp); err == nil {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	rate = float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "req/s")
	return rate, reportCPU(b, start0)
}

// BenchmarkUDPRequestResponse compares, in one run, 64-byte request/response
// over 16 flows: straight to the echo server, through an iptables DNAT rule,
// through the naive relay and through this relay (batched and unbatched),
// both relays behind the same REDIRECT rule. It logs each rate as a ratio to
// DNAT.
func BenchmarkUDPRequestResponse(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	const flows = 16
	echo := startEcho(b, "udp4", "127.0.0.1:0")
	loopback := netip.MustParseAddr("127.0.0.1")

	// nat steers a service port to dest with one rule, like a portal.
	vipPort := 30000
	nat := func(b *testing.B, target []string) netip.AddrPort {
		vipPort++
		args := []string{"-t", "nat", "-A", "OUTPUT", "-p", "udp", "-d", "127.0.0.1", "--dport", strconv.Itoa(vipPort)}
		out, err := exec.Command("iptables", append(args, target...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("iptables: %v: %s", err, out)
		}
		return netip.AddrPortFrom(loopback, uint16(vipPort))
	}
	rates := map[string]float64{}
	order := []string{"direct", "dnat", "naive-relay", "relay-unbatched", "relay"}

	b.Run("direct", func(b *testing.B) { rates["direct"] = requestResponse(b, echo.addr(), flows) })
	b.Run("dnat", func(b *testing.B) {
		rates["dnat"] = requestResponse(b, nat(b, []string{"-j", "DNAT", "--to-destination", echo.addr().String()}), flows)
	})
	b.Run("naive-relay", func(b *testing.B) {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		n := &naiveRelay{conn: conn, endpoint: echo.addr(), flows: map[netip.AddrPort]*net.UDPConn{}}
		go n.serve()
		defer n.close()
		port := conn.LocalAddr().(*net.UDPAddr).Port
		rates["naive-relay"] = requestResponse(b, nat(b, []string{"-j", "REDIRECT", "--to-ports", strconv.Itoa(port)}), flows)
	})
	for _, v := range []struct {
		name  string
		batch int
	}{{"relay-unbatched", 1}, {"relay", DefaultBatchSize}} {
		b.Run(v.name, func(b *testing.B) {
			conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				b.Fatal(err)
			}
			r, err := New(Config{Conn: conn, Picker: &fakePicker{endpoints: []netip.AddrPort{echo.addr()}},
				IdleTimeout: time.Minute, BatchSize: v.batch, Metrics: lbmetrics.Discard(), Name: v.name})
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = r.Serve(context.Background()) }()
			defer r.Close()
			rates[v.name] = requestResponse(b, nat(b, []string{"-j", "REDIRECT", "--to-ports", strconv.Itoa(int(r.Addr().Port()))}), flows)
		})
	}
	if rates["dnat"] == 0 {
		return
	}
	summary := fmt.Sprintf("64-byte UDP request/response, %d flows, ratio to iptables DNAT:", flows)
	for _, name := range order {
		summary += fmt.Sprintf("\n  %-16s %10.0f req/s  %5.0f%%", name, rates[name], 100*rates[name]/rates["dnat"])
	}
	if rates["naive-relay"] > 0 {
		summary += fmt.Sprintf("\n  relay / naive-relay = %.2f", rates["relay"]/rates["naive-relay"])
	}
	b.Log(summary)
}

// newFlows runs b.N new flows to targets (round-robin) from workers
// concurrent clients: each flow is a new client socket that sends one
// 64-byte datagram, waits for the reply and closes. It returns flows per
// second and the process's CPU µs per flow.
func newFlows(b *testing.B, targets []netip.AddrPort, workers int) (rate, cpu float64) {
	b.Helper()
	b.ResetTimer()
	start, start0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	var lost atomic.Int64 // datagrams or replies lost, each costing a second
	for w := range workers {
		n := b.N / workers
		if w < b.N%workers {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := make([]byte, 64), make([]byte, 128)
			for i := range n {
				c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(targets[(w+i*workers)%len(targets)]))
				if err != nil {
					b.Error(err)
					return
				}
				for {
					if _, err := c.Write(req); err != nil {
						b.Error(err)
						c.Close()
						return
					}
					_ = c.SetReadDeadline(time.Now().Add(time.Second))
					if _, err := c.Read(resp); err == nil {
						break
					}
					lost.Add(1)
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	rate = float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "flows/s")
	b.ReportMetric(float64(lost.Load()), "lost")
	return rate, reportCPU(b, start0)
}

// processCPU is the CPU time (user and system) the process has used; the
// loopback's softirq work runs in the sending threads, so it is included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports and returns the process's CPU µs per operation since
// start: on a shared machine a steadier figure than the rate.
func reportCPU(b *testing.B, start time.Duration) float64 {
	cpu := float64(processCPU()-start) / float64(time.Microsecond) / float64(b.N)
	b.ReportMetric(cpu, "cpu-µs/op")
	return cpu
}

// BenchmarkUDPSharedSocket compares, in one run, a per-socket relay with a
// relay on one shared socket holding 1 and 30,000 routes (the shared socket
// is bound to 0.0.0.0 and reached through 127.0.0.0/8 addresses, each a
// different original destination, as socket-lookup steering would deliver
// service addresses): 64-byte round trips over 16 flows, and new flows.
// It logs each rate as a ratio to the per-socket relay's.
func BenchmarkUDPSharedSocket(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	const flows = 16
	echo := startEcho(b, "udp4", "127.0.0.1:0")
	picker := &fakePicker{endpoints: []netip.AddrPort{echo.addr()}}

	// perSocket returns the address of a per-socket relay.
	// Each relay serves both sub-benchmarks and is closed before the
	// next starts, so only one raw socket (which the kernel hands a copy
	// of every UDP datagram) exists at a time.
	perSocket := func(b *testing.B) ([]netip.AddrPort, func()) {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		r, err := New(Config{Conn: conn, Picker: picker, Metrics: lbmetrics.Discard(), Name: "per-socket"})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = r.Serve(context.Background()) }()
		return []netip.AddrPort{r.Addr()}, func() { r.Close() }
	}
	// shared starts a shared relay with routes routes and returns flows
	// service addresses spread over them.
	shared := func(routes int) func(b *testing.B) ([]netip.AddrPort, func()) {
		return func(b *testing.B) ([]netip.AddrPort, func()) {
			replies, err := rawudp.Open()
			if err != nil {
				b.Fatal(err)
			}
			conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
			if err != nil {
				b.Fatal(err)
			}
			port := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
			table := make(map[netip.AddrPort]*Route, routes)
			var services []netip.AddrPort
			for i := range routes {
				addr := netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})
				ap := netip.AddrPortFrom(addr, port)
				table[ap] = &Route{Name: ap.String(), Picker: picker}
				if i%max(1, routes/flows) == 0 && len(services) < flows {
					services = append(services, ap)
				}
			}
			var mu sync.RWMutex // as a caller changing its table would
			r, err := New(Config{Conn: conn, Metrics: lbmetrics.Discard(), Name: "shared", Replies: replies,
				Routes: func(local netip.AddrPort) (*Route, bool) {
					mu.RLock()
					defer mu.RUnlock()
					rt, ok := table[local]
					return rt, ok
				}})
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = r.Serve(context.Background()) }()
			return services, func() { r.Close(); replies.Close() }
		}
	}
	relays := []struct {
		name  string
		start func(b *testing.B) ([]netip.AddrPort, func())
	}{{"per-socket", perSocket}, {"shared-1", shared(1)}, {"shared-30000", shared(30000)}}
	type figures struct{ rate, cpu float64 }
	results := map[string]figures{}
	for _, rl := range relays {
		targets, stop := rl.start(b)
		b.Run("round-trips/"+rl.name, func(b *testing.B) {
			rate, cpu := requestResponseTo(b, targets, flows)
			results["round-trips/"+rl.name] = figures{rate, cpu}
		})
		b.Run("new-flows/"+rl.name, func(b *testing.B) {
			rate, cpu := newFlows(b, targets, flows)
			results["new-flows/"+rl.name] = figures{rate, cpu}
		})
		stop()
	}
	summary := "UDP relay on a shared socket against the per-socket relay (rate, process CPU per operation, and the ratios):"
	for _, kind := range []string{"round-trips", "new-flows"} {
		base := results[kind+"/per-socket"]
		if base.rate == 0 || base.cpu == 0 {
			continue
		}
		for _, rl := range relays {
			f := results[kind+"/"+rl.name]
			summary += fmt.Sprintf("\n  %-26s %8.0f /s (%.2f×)  %6.1f cpu-µs/op (%.2f×)", kind+"/"+rl.name,
				f.rate, f.rate/base.rate, f.cpu, f.cpu/base.cpu)
		}
	}
	b.Log(summary)
}
