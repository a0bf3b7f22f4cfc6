package healthz

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/serve/httplimit"
	"kproxy.dev/kproxy/sync/serve/httplimit/httplimittest"
)

// A load balancer's health check must be answered however many slow or idle
// connections other hosts hold: kproxy's limits on those connections must
// bound its descriptors without locking the probe out. The server listens
// on its default address in a namespace of the test's own; the hostile
// hosts and the prober are loopback addresses.
func TestHealthzAnswersProbesUnderConnectionFlood(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	const (
		probes     = 32
		probeEvery = 250 * time.Millisecond
	)
	prober := netip.MustParseAddr("127.1.0.1")
	tests := []httplimittest.Attack{
		{Kind: httplimittest.Slowloris, Sources: 18, PerSource: 16},
		{Kind: httplimittest.Slowloris, Sources: 64, PerSource: 16},
		{Kind: httplimittest.Idle, Sources: 64, PerSource: 16},
		{Kind: httplimittest.SlowKeepAlive, Sources: 64, PerSource: 16},
	}
	for _, attack := range tests {
		t.Run(fmt.Sprintf("%v/%d_sources", attack.Kind, attack.Sources), func(t *testing.T) {
			s, err := NewHealthServer("", New(time.Minute, nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			limited, ok := s.listener.(*httplimit.Listener)
			if !ok {
				t.Fatalf("the health server's listener is a %T, not limited", s.listener)
			}
			serve(t, s)
			held := func() int { n, _ := limited.Open(netip.Addr{}); return n }

			attackers := httplimittest.Start(t, "127.0.0.1:10256", attack)
			// The attack has taken every slot before the probes start.
			start := time.Now()
			for held() < httplimit.DefaultTotal {
				if time.Since(start) > time.Minute {
					t.Fatalf("the attackers hold %d connections after a minute, want %d", held(), httplimit.DefaultTotal)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("%v from %d sources x %d: server full (%d connections) after %v",
				attack.Kind, attack.Sources, attack.PerSource, held(), time.Since(start).Round(time.Millisecond))

			minHeld, maxHeld := held(), held()
			got := httplimittest.Probe("http://127.0.0.1:10256/healthz", prober, probes, probeEvery, httplimittest.ProbeTimeout, func() {
				n := held()
				minHeld, maxHeld = min(minHeld, n), max(maxHeld, n)
			})
			t.Logf("probes answered %d/%d (slowest %v); server held %d-%d connections (limit %d); attackers opened %d connections, the server closed %d",
				got.Answered, got.Sent, got.Slowest.Round(time.Millisecond), minHeld, maxHeld, httplimit.DefaultTotal, attackers.Dials(), attackers.Closed())
			if got.Answered != got.Sent {
				t.Errorf("%d of %d probes not answered 200 under the attack:", got.Sent-got.Answered, got.Sent)
				for _, f := range got.Failures[:min(len(got.Failures), 5)] {
					t.Log("  ", f)
				}
			}
			if maxHeld > httplimit.DefaultTotal {
				t.Errorf("the server held %d connections, over its limit %d", maxHeld, httplimit.DefaultTotal)
			}
		})
	}
}
