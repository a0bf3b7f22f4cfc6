package userspace

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/localroute/fakeroutes"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/sockdiag"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// fakeHolders answers Holders from a table and counts the questions.
type fakeHolders struct {
	holders map[sockdiag.Protocol][]sockdiag.Holder
	asked   int
}

func (f *fakeHolders) Holders(proto sockdiag.Protocol, ap netip.AddrPort) ([]sockdiag.Holder, error) {
	f.asked++
	if ap.Port() == 0 {
		return nil, nil // the start-up probe
	}
	return f.holders[proto], nil
}

// logLines collects a logger's lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() klog.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{})
}

func (l *logLines) count(substrings ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		all := true
		for _, s := range substrings {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// TestPortalConflicts: service addresses that other sockets hold when
// local portals bind them are logged once naming the holder, counted per
// protocol and listed for /healthz; once the holders close, the next sync
// serves the addresses and the count drops to zero. Real sockets in a
// fresh namespace; the holders are named by a fake sock_diag.
func TestPortalConflicts(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	// The squatters: a TCP listener on every address, a UDP socket on
	// the DNS service's address (a local route is not needed with
	// IP_FREEBIND).
	tcpSquatter, err := net.Listen("tcp4", "0.0.0.0:80")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpSquatter.Close()
	udpSquatter, err := localPortalListenConfig().ListenPacket(context.Background(), "udp4", "198.18.0.53:80")
	if err != nil {
		t.Fatal(err)
	}
	defer udpSquatter.Close()
	finder := &fakeHolders{holders: map[sockdiag.Protocol][]sockdiag.Holder{
		sockdiag.TCP: {{Local: netip.MustParseAddrPort("0.0.0.0:80"), UID: 65534, Inode: 4242}},
		sockdiag.UDP: {{Local: netip.MustParseAddrPort("198.18.0.53:80"), UID: 1000, Inode: 4343}},
	}}

	var logs logLines
	ctx := klog.NewContext(context.Background(), logs.logger())
	nodeIP := netip.MustParseAddr("198.19.0.1")
	reg := prometheus.NewRegistry()
	m, err := New(ctx, Config{
		Features: kernel.Features{SCTP: kernel.Support{Detail: "EPROTONOSUPPORT"}}, NodeName: "node-a", Registerer: reg,
		Routes: fakeroutes.New(nodeIP), Portals: contract.PortalsLocal, Holders: finder,
		LocalAddresses: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("127.0.0.1"), nodeIP}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if logs.count("Any local user can bind a service address", "IPv4") != 1 {
		t.Errorf("no start-up warning of the local portals' exposure in\n%s", strings.Join(logs.lines, "\n"))
	}

	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(service("web", "198.18.0.10", v1.ProtocolTCP, 0))
	tr.OnServiceUpdate(service("dns", "198.18.0.53", v1.ProtocolUDP, 0))
	tr.OnServiceUpdate(service("db", "198.18.0.20", v1.ProtocolUDP, 0))
	for _, s := range []struct {
		name  string
		proto v1.Protocol
	}{{"web", v1.ProtocolTCP}, {"dns", v1.ProtocolUDP}, {"db", v1.ProtocolUDP}} {
		tr.OnEndpointSliceUpdate(slice(s.name, s.proto, "198.19.1.11"))
	}
	tr.OnSynced()
	sync := func() {
		t.Helper()
		snap, changes := tr.Snapshot()
		if err := m.Sync(ctx, snap, changes); err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
	gauge := func(proto v1.Protocol) float64 {
		return testutil.ToFloat64(m.conflicts.gauge.WithLabelValues(string(proto)))
	}

	sync()
	sync() // the retry of the next sync neither logs again nor counts twice
	if tcp, udp := gauge(v1.ProtocolTCP), gauge(v1.ProtocolUDP); tcp != 1 || udp != 1 {
		t.Errorf("kproxy_userspace_portal_conflicts TCP %v, UDP %v; want 1 and 1", tcp, udp)
	}
	count, shown := m.PortalConflicts()
	want := []string{
		"TCP 198.18.0.10:80 of ns/web:p/TCP held by uid 65534 (socket inode 4242 bound to 0.0.0.0:80)",
		"UDP 198.18.0.53:80 of ns/dns:p/UDP held by uid 1000 (socket inode 4343 bound to 198.18.0.53:80)",
	}
	if count != 2 || fmt.Sprint(shown) != fmt.Sprint(want) {
		t.Errorf("PortalConflicts() = %d, %q; want 2, %q", count, shown, want)
	}
	for _, addr := range []string{"198.18.0.10:80", "198.18.0.53:80"} {
		if n := logs.count("NOT served by kproxy", addr); n != 1 {
			t.Errorf("the conflict on %s was logged %d times over two syncs, want once:\n%s", addr, n, strings.Join(logs.lines, "\n"))
		}
	}
	if logs.count("NOT served by kproxy", "uid 65534 (socket inode 4242") != 1 {
		t.Errorf("the log does not name the TCP holder:\n%s", strings.Join(logs.lines, "\n"))
	}
	if logs.count("198.18.0.20:80", "NOT served") != 0 {
		t.Error("a service address nobody else holds was reported as held")
	}

	// The holders go: the next sync serves both addresses.
	tcpSquatter.Close()
	udpSquatter.Close()
	sync()
	if tcp, udp := gauge(v1.ProtocolTCP), gauge(v1.ProtocolUDP); tcp != 0 || udp != 0 {
		t.Errorf("after the holders closed, kproxy_userspace_portal_conflicts TCP %v, UDP %v; want 0", tcp, udp)
	}
	if count, shown := m.PortalConflicts(); count != 0 || len(shown) != 0 {
		t.Errorf("after the holders closed, PortalConflicts() = %d, %q; want none", count, shown)
	}
	if n := logs.count("free again"); n != 2 {
		t.Errorf("%d conflicts logged as over, want 2:\n%s", n, strings.Join(logs.lines, "\n"))
	}
	for key, r := range m.relays {
		if len(r.servers) != 1 {
			t.Errorf("%s has %d sockets after the holders closed, want 1", key, len(r.servers))
		}
	}
}

// TestNoteLeavesOtherErrors: only EADDRINUSE is a conflict; any other bind
// failure stays an error of the sync and is not counted.
func TestNoteLeavesOtherErrors(t *testing.T) {
	finder := &fakeHolders{}
	c, err := newPortalConflicts(klog.Background(), finder, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{key: balancer.Key{Family: ipfamily.IPv4}}
	r.spec.Store(&relaySpec{protocol: v1.ProtocolTCP})
	ap := netip.MustParseAddrPort("198.18.0.10:80")
	for _, bindErr := range []error{syscall.EACCES, syscall.EADDRNOTAVAIL} {
		if got := c.note(r, ap, fmt.Errorf("listen: %w", bindErr)); got == nil {
			t.Errorf("note(%v) = nil, want the error back", bindErr)
		}
	}
	c.settle()
	if finder.asked != 0 || len(c.published) != 0 {
		t.Errorf("other errors asked sock_diag %d times and published %q; want neither", finder.asked, c.published)
	}
	if got := c.note(r, ap, fmt.Errorf("listen: %w", syscall.EADDRINUSE)); got != nil {
		t.Errorf("note(EADDRINUSE) = %v, want nil (reported as a conflict)", got)
	}
	c.settle()
	if len(c.published) != 1 || !strings.Contains(c.published[0], "sock_diag no longer lists") {
		t.Errorf("a conflict whose holder sock_diag does not find: published %q, want it counted and said so", c.published)
	}
}
