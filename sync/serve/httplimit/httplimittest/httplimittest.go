// Package httplimittest attacks an HTTP server the way a hostile host
// would try to deny its health checks (many source addresses, each holding
// slow or idle connections, reconnecting whenever one is closed), and
// probes it as a load balancer would while it does. Tests run it on
// loopback, where every 127.0.0.0/8 address is a source of its own.
package httplimittest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Kind is what each hostile connection does.
type Kind int

const (
	// Slowloris sends a request's headers one byte every ByteEvery and
	// never finishes them.
	Slowloris Kind = iota
	// Idle connects and sends nothing.
	Idle
	// SlowKeepAlive sends a complete request every ByteEvery on a kept-alive
	// connection and idles in between: a client that looks well-behaved.
	SlowKeepAlive
)

func (k Kind) String() string {
	switch k {
	case Slowloris:
		return "slowloris"
	case Idle:
		return "idle"
	case SlowKeepAlive:
		return "slow keep-alive"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ByteEvery paces a slowloris' bytes and a slow keep-alive's requests.
const ByteEvery = 3 * time.Second

// ProbeTimeout is how long a probe may take to be answered: a cloud load
// balancer's usual health-check timeout. Under attack on an idle machine a
// probe is answered within a second; the rest is room for a busy one.
const ProbeTimeout = 5 * time.Second

// redialPause is how soon an attacker reconnects after the server closed
// it: sooner than slowloris tools do, but not a flood of connections, in
// which the attackers' connects queue ahead of the probe's in the kernel
// whatever the server then does with them (and which would take the CPU
// of a machine the test shares).
const redialPause = time.Second

// Attack describes the hostile hosts: Sources addresses from 127.0.0.2 on,
// PerSource connections from each.
type Attack struct {
	Kind      Kind
	Sources   int
	PerSource int
}

// Attackers is a running attack.
type Attackers struct {
	dials  atomic.Int64
	closed atomic.Int64 // connections the server closed
}

// Dials and Closed count connections opened, and closed by the server.
func (a *Attackers) Dials() int  { return int(a.dials.Load()) }
func (a *Attackers) Closed() int { return int(a.closed.Load()) }

// Source is the address of hostile source i (0-based): 127.0.0.2 on.
func Source(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, byte((i + 2) / 256), byte((i + 2) % 256)})
}

// Start runs the attack on addr until the test ends.
func Start(t testing.TB, addr string, a Attack) *Attackers {
	t.Helper()
	if a.Sources < 1 || a.Sources+2 > 1<<16 {
		t.Fatalf("%d sources: want 1 to %d (127.0.0.2 to 127.0.255.255)", a.Sources, 1<<16-2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	at := &Attackers{}
	for s := range a.Sources {
		for range a.PerSource {
			wg.Add(1)
			go func() {
				defer wg.Done()
				at.hold(ctx, addr, Source(s), a.Kind)
			}()
		}
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return at
}

// hold keeps one hostile connection open from src, reopening it whenever
// the server closes it.
func (at *Attackers) hold(ctx context.Context, addr string, src netip.Addr, kind Kind) {
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 5 * time.Second}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			sleep(ctx, redialPause)
			continue
		}
		at.dials.Add(1)
		closedByServer := drive(ctx, c, kind)
		_ = c.Close()
		if closedByServer {
			at.closed.Add(1)
		}
		sleep(ctx, redialPause)
	}
}

// drive plays kind on c until the server closes it (true) or ctx ends.
// Reading with a deadline is both the wait between writes and the way to
// see the server close the connection.
func drive(ctx context.Context, c net.Conn, kind Kind) bool {
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	const header = "GET /healthz HTTP/1.1\r\nHost: probe\r\nUser-Agent: slow\r\n"
	sent := 0
	buf := make([]byte, 4096)
	for {
		if kind == Idle {
			// Nothing to send: wait for the server or the end.
			if _, err := c.Read(buf); err != nil {
				return ctx.Err() == nil
			}
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(ByteEvery))
		for {
			if _, err := c.Read(buf); err != nil {
				if ctx.Err() != nil {
					return false
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return true
			}
		}
		var out []byte
		switch kind {
		case Slowloris:
			out = []byte{header[sent%len(header)]}
			sent++
		case SlowKeepAlive:
			out = []byte("GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n")
		}
		if _, err := c.Write(out); err != nil {
			return ctx.Err() == nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Probes is what a prober saw.
type Probes struct {
	Sent, Answered int
	// Slowest is the longest a probe took, answered or not.
	Slowest time.Duration
	// Failures holds one line per probe not answered 200.
	Failures []string
}

// Probe sends n GET requests for url from src, one every interval, each on
// a new connection (as load balancers' health checks do) and allowed
// timeout. each, when set, runs after every probe.
func Probe(url string, src netip.Addr, n int, interval, timeout time.Duration, each func()) Probes {
	var p Probes
	for i := range n {
		start := time.Now()
		err := probeOnce(url, src, timeout)
		p.Sent++
		p.Slowest = max(p.Slowest, time.Since(start))
		if err == nil {
			p.Answered++
		} else {
			p.Failures = append(p.Failures, fmt.Sprintf("probe %d after %v: %v", i+1, time.Since(start).Round(time.Millisecond), err))
		}
		if each != nil {
			each()
		}
		if wait := interval - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
	}
	return p
}

func probeOnce(url string, src netip.Addr, timeout time.Duration) error {
	tr := &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}).DialContext,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
