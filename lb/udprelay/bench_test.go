package udprelay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/lbmetrics"
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
	b.Helper()
	conns := make([]*net.UDPConn, flows)
	for i := range conns {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(target))
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
	start := time.Now()
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
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "req/s")
	return rate
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
