package userspace

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestUDPRelayWaitsForItsGuard: while the portal rules (and with them the
// guard dropping datagrams that were not DNATed to a proxy port) cannot be
// written, a new UDP relay must relay nothing, or its proxy port is an open
// relay for anyone who sends to it directly. Once the rules are in, it
// serves.
func TestUDPRelayWaitsForItsGuard(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	lab.Run(t, "ip", "link", "set", "lo", "up")
	backend, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	received := make(chan string, 16)
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := backend.ReadFromUDP(buf)
			if err != nil {
				return
			}
			received <- string(buf[:n])
			_, _ = backend.WriteToUDP(buf[:n], from)
		}
	}()

	v4 := &recordingApplier{fail: &restore.Error{Command: "iptables-nft-restore", Line: 3, Message: "the kernel refused"}}
	m := newRedirectMode(t, v4)
	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(service("dns", "198.18.0.53", v1.ProtocolUDP, 0))
	tr.OnEndpointSliceUpdate(slice("dns", v1.ProtocolUDP, "127.0.0.1"))
	tr.OnSynced()
	sync := func() error {
		snap, changes := tr.Snapshot()
		return m.Sync(context.Background(), snap, changes)
	}

	if err := sync(); err == nil {
		t.Fatal("sync with a failing restore succeeded")
	}
	relay := m.relays[keyOf("dns", v1.ProtocolUDP, balancer.Internal)]
	if relay == nil || relay.port == 0 {
		t.Fatalf("no UDP relay with a proxy port after the failed sync: %v", m.relays)
	}
	direct, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(relay.port)})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	send := func(msg string) {
		t.Helper()
		if _, err := direct.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	send("before the guard")
	select {
	case got := <-received:
		t.Fatalf("the endpoint received %q through a relay whose guard rule is not in the kernel", got)
	case <-time.After(300 * time.Millisecond):
	}

	v4.mu.Lock()
	v4.fail = nil
	v4.mu.Unlock()
	if err := sync(); err != nil {
		t.Fatalf("sync once the restore works: %v", err)
	}
	send("after the guard")
	select {
	case got := <-received:
		if got != "after the guard" {
			t.Fatalf("the endpoint received %q, want only the datagram sent after the guard", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay relays nothing once its guard rule is in")
	}
}

// TestPeriodicSyncRepairsPortals: a periodic sync asks each family's
// applier whether its rules are intact and rewrites them all when not; other
// syncs do not ask.
func TestPeriodicSyncRepairsPortals(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	v4 := &recordingApplier{}
	m := newRedirectMode(t, v4)
	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(service("web", "198.18.0.10", v1.ProtocolTCP, 0))
	tr.OnSynced()
	steps := []struct {
		name      string
		broken    string
		periodic  bool
		wantFulls int
	}{
		{"first sync is full", "", false, 1},
		{"periodic, intact", "", true, 1},
		{"a change while broken: not checked", "chain KUBE-PORTALS-CONTAINER of the nat table is gone", false, 1},
		{"periodic, broken: rewritten", "chain KUBE-PORTALS-CONTAINER of the nat table is gone", true, 2},
		{"periodic, intact again", "", true, 2},
	}
	for _, s := range steps {
		v4.mu.Lock()
		v4.broken = s.broken
		v4.mu.Unlock()
		snap, changes := tr.Snapshot()
		changes.Periodic = s.periodic
		if err := m.Sync(context.Background(), snap, changes); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		v4.mu.Lock()
		fulls := v4.fulls
		v4.mu.Unlock()
		if fulls != s.wantFulls {
			t.Errorf("%s: %d full applies, want %d", s.name, fulls, s.wantFulls)
		}
	}
	if got := testutil.ToFloat64(m.portalRepairs); got != 1 {
		t.Errorf("kproxy_userspace_portal_repairs_total = %v, want 1", got)
	}
}

// newRedirectMode builds the mode with REDIRECT portals written through
// applier (every family), on a node whose addresses are 127.0.0.1 and
// 198.19.0.1; it is closed when t ends.
func newRedirectMode(t *testing.T, applier Applier) *Mode {
	t.Helper()
	m, err := New(context.Background(), Config{
		Features: features(), NodeName: "node-a", Registerer: prometheus.NewRegistry(), Opener: &fakeOpener{held: map[string]bool{}},
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1")}, nil
		},
		Applier: func(ipfamily.Family) (Applier, error) { return applier, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
