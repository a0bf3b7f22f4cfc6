package servicehealth

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/serve/httplimit"
	"kproxy.dev/kproxy/sync/serve/httplimit/httplimittest"
	"kproxy.dev/kproxy/sync/servicemap"
)

// countingListener counts the connections accepted and not yet closed,
// whoever closes them.
type countingListener struct {
	net.Listener
	open *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	return &countedConn{Conn: c, open: l.open}, nil
}

type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// A cloud load balancer's health check of an externalTrafficPolicy: Local
// service must be answered however many slow connections other hosts hold
// on the node port: otherwise the node drops out of the service.
func TestHealthCheckPortAnswersProbesUnderSlowloris(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	const hc = 30256
	var open atomic.Int64
	s := New(Config{
		Addresses: loopback,
		Listen: func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			return countingListener{Listener: ln, open: &open}, nil
		},
	})
	t.Cleanup(func() { s.Close() })
	if err := s.Sync(servicemap.NewSnapshot(1, nil, port("lb", "http", hc, ep("198.19.1.11", true, true)))); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", hc)
	attack := httplimittest.Attack{Kind: httplimittest.Slowloris, Sources: 64, PerSource: 16}
	attackers := httplimittest.Start(t, addr, attack)
	start := time.Now()
	for open.Load() < httplimit.DefaultTotal {
		if time.Since(start) > time.Minute {
			t.Fatalf("the attackers hold %d connections after a minute, want %d", open.Load(), httplimit.DefaultTotal)
		}
		time.Sleep(20 * time.Millisecond)
	}
	maxHeld := open.Load()
	got := httplimittest.Probe("http://"+addr+"/healthz", netip.MustParseAddr("127.1.0.1"), 32, 250*time.Millisecond, httplimittest.ProbeTimeout,
		func() { maxHeld = max(maxHeld, open.Load()) })
	t.Logf("%v from %d sources x %d: probes answered %d/%d (slowest %v); at most %d connections open (limit %d); attackers opened %d",
		attack.Kind, attack.Sources, attack.PerSource, got.Answered, got.Sent, got.Slowest.Round(time.Millisecond), maxHeld, httplimit.DefaultTotal, attackers.Dials())
	if got.Answered != got.Sent {
		t.Errorf("%d of %d probes not answered 200 under the attack:", got.Sent-got.Answered, got.Sent)
		for _, f := range got.Failures[:min(len(got.Failures), 5)] {
			t.Log("  ", f)
		}
	}
	// One more than the limit: a newcomer is accepted before the
	// connection it displaces is closed.
	if maxHeld > httplimit.DefaultTotal+1 {
		t.Errorf("%d connections open, over the limit %d", maxHeld, httplimit.DefaultTotal)
	}
}
