package conntrack_test

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/conntrack/fakeconntrack"
	"kproxy.dev/kproxy/sync/servicemap"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func name(svc string, proto v1.Protocol) servicemap.ServicePortName {
	return testkit.PortName("default", svc, "p", proto)
}

// servicePort is a port with one cluster IP and the given serving
// endpoints ("ip:port").
func servicePort(svc string, proto v1.Protocol, vip string, port uint16, endpoints ...string) *servicemap.ServicePort {
	sp := testkit.Port("default", svc, port, vip, testkit.Named("p"), testkit.Protocol(proto))
	for _, e := range endpoints {
		sp.Endpoints = append(sp.Endpoints, testkit.EP(e))
	}
	return sp
}

func flow(proto conntrack.Protocol, src, dst, reply string) conntrack.Flow {
	return conntrack.Flow{Protocol: proto, OrigSrc: netip.MustParseAddrPort(src),
		OrigDst: netip.MustParseAddrPort(dst), ReplySrc: netip.MustParseAddrPort(reply)}
}

func flowStrings(flows []conntrack.Flow) []string {
	var out []string
	for _, f := range flows {
		out = append(out, f.String())
	}
	return out
}

// fixture is a Cleaner on a fake table, with a clock the test moves.
type fixture struct {
	t       *testing.T
	table   *fakeconntrack.Table
	reg     *prometheus.Registry
	clock   *clocktesting.FakeClock
	cleaner *conntrack.Cleaner
	gen     uint64
}

func newFixture(t *testing.T, cfg conntrack.Config) *fixture {
	t.Helper()
	f := &fixture{t: t, table: &fakeconntrack.Table{}, reg: prometheus.NewRegistry(), clock: clocktesting.NewFakeClock(t0)}
	cfg.Table, cfg.Registerer, cfg.Clock = f.table, f.reg, f.clock
	if cfg.LocalAddresses == nil {
		cfg.LocalAddresses = func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("127.0.0.1")}, nil
		}
	}
	c, err := conntrack.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.cleaner = c
	return f
}

// sync tells the cleaner that a sync applied changes, leading to ports.
func (f *fixture) sync(changes servicemap.ChangeSet, ports ...*servicemap.ServicePort) {
	f.t.Helper()
	_, ctx := ktesting.NewTestContext(f.t)
	f.gen++
	f.cleaner.AfterSync(ctx, servicemap.NewSnapshot(f.gen, nil, ports...), &changes)
}

func (f *fixture) wantFlows(step string, want ...conntrack.Flow) {
	f.t.Helper()
	if diff := cmp.Diff(flowStrings(want), flowStrings(f.table.Flows())); diff != "" {
		f.t.Errorf("%s: flows left (-want +got):\n%s", step, diff)
	}
}

func (f *fixture) wantMetrics(step string, deleted, failures int) {
	f.t.Helper()
	want := strings.NewReader(strings.ReplaceAll(strings.ReplaceAll(`
# HELP kproxy_conntrack_cleanup_failures_total [ALPHA] Conntrack cleanup passes that failed (retried after the next sync)
# TYPE kproxy_conntrack_cleanup_failures_total counter
kproxy_conntrack_cleanup_failures_total FAILURES
# HELP kproxy_conntrack_flows_deleted_total [ALPHA] Stale UDP and SCTP conntrack flows deleted after syncs and by reconciliation
# TYPE kproxy_conntrack_flows_deleted_total counter
kproxy_conntrack_flows_deleted_total DELETED
`, "FAILURES", strconv.Itoa(failures)), "DELETED", strconv.Itoa(deleted)))
	if err := testutil.GatherAndCompare(f.reg, want, "kproxy_conntrack_flows_deleted_total", "kproxy_conntrack_cleanup_failures_total"); err != nil {
		f.t.Errorf("%s: %v", step, err)
	}
}

func TestCleanerDeletesWhatEachSyncMadeStale(t *testing.T) {
	f := newFixture(t, conntrack.Config{Dataplane: conntrack.KernelNAT})
	pinned := flow(conntrack.UDP, "198.19.0.2:40001", "198.18.0.10:53", "198.19.1.11:9000")
	refused := flow(conntrack.UDP, "198.19.0.2:40002", "198.18.0.10:53", "198.18.0.10:53")
	other := flow(conntrack.UDP, "198.19.0.2:40003", "198.18.0.10:53", "198.19.1.12:9000")
	web := flow(conntrack.TCP, "198.19.0.2:40004", "198.18.0.40:80", "198.19.1.11:8080")
	unrelated := flow(conntrack.UDP, "198.19.0.2:40005", "203.0.113.9:53", "203.0.113.9:53")
	f.table.Add(pinned, refused, other, web, unrelated)

	dnsName, webName := name("dns", v1.ProtocolUDP), name("web", v1.ProtocolTCP)
	dns := servicePort("dns", v1.ProtocolUDP, "198.18.0.10", 53, "198.19.1.11:9000", "198.19.1.12:9000")
	webPort := servicePort("web", v1.ProtocolTCP, "198.18.0.40", 80, "198.19.1.11:8080")
	f.sync(servicemap.ChangeSet{Full: true, Changed: []servicemap.ServicePortName{dnsName, webName},
		NewlyServed: []servicemap.ServicePortName{dnsName, webName}}, dns, webPort)
	f.wantFlows("first sync", pinned, other, web, unrelated)

	// backend .11 leaves both services; only the UDP flow it answers goes.
	dnsAfter := servicePort("dns", v1.ProtocolUDP, "198.18.0.10", 53, "198.19.1.12:9000")
	webAfter := servicePort("web", v1.ProtocolTCP, "198.18.0.40", 80)
	f.sync(servicemap.ChangeSet{Changed: []servicemap.ServicePortName{dnsName, webName},
		StaleEndpoints: []servicemap.StaleEndpoint{
			{ServicePort: dnsName, Endpoint: dns.Endpoints[0]},
			{ServicePort: webName, Endpoint: webPort.Endpoints[0]},
		}}, dnsAfter, webAfter)
	f.wantFlows("endpoint removed", other, web, unrelated)

	f.sync(servicemap.ChangeSet{Changed: []servicemap.ServicePortName{dnsName, webName},
		Removed: []*servicemap.ServicePort{dnsAfter, webAfter}})
	f.wantFlows("services removed", web, unrelated)
	f.wantMetrics("after three syncs", 3, 0)
}

func TestCleanerRetriesFailedPasses(t *testing.T) {
	f := newFixture(t, conntrack.Config{Dataplane: conntrack.KernelNAT, ReconcileInterval: time.Hour})
	pinned := flow(conntrack.UDP, "198.19.0.2:40001", "198.18.0.10:53", "198.19.1.11:9000")
	f.table.Add(pinned)
	dnsName := name("dns", v1.ProtocolUDP)
	dns := servicePort("dns", v1.ProtocolUDP, "198.18.0.10", 53, "198.19.1.11:9000")
	f.sync(servicemap.ChangeSet{Full: true, Changed: []servicemap.ServicePortName{dnsName}}, dns)
	f.table.TakeRequests()

	f.table.FailNext(1)
	emptied := servicePort("dns", v1.ProtocolUDP, "198.18.0.10", 53)
	f.sync(servicemap.ChangeSet{Changed: []servicemap.ServicePortName{dnsName},
		StaleEndpoints: []servicemap.StaleEndpoint{{ServicePort: dnsName, Endpoint: dns.Endpoints[0]}}}, emptied)
	f.wantFlows("failed pass", pinned)
	f.wantMetrics("failed pass", 0, 1)
	f.table.TakeRequests()

	// The next sync changed nothing; the pending filter goes again.
	f.sync(servicemap.ChangeSet{}, emptied)
	f.wantFlows("retried", []conntrack.Flow{}...)
	f.wantMetrics("retried", 1, 1)
	retried := f.table.TakeRequests()
	wantFilters := []string{"udp 198.18.0.10:53 answered by 198.19.1.11:9000"}
	if len(retried) != 1 || !cmp.Equal(filterStrings(retried[0].Filters), wantFilters) {
		t.Errorf("retry requests: %+v, want one with filters %v", retried, wantFilters)
	}

	// Once a retry succeeded, nothing is pending.
	f.sync(servicemap.ChangeSet{}, emptied)
	if got := f.table.TakeRequests(); len(got) != 0 {
		t.Errorf("requests after a successful retry: %+v, want none", got)
	}
}

func filterStrings(fs []conntrack.Filter) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

func TestCleanerReconcilesOnSchedule(t *testing.T) {
	f := newFixture(t, conntrack.Config{Dataplane: conntrack.KernelNAT, ReconcileInterval: 30 * time.Second})
	dns := servicePort("dns", v1.ProtocolUDP, "198.18.0.10", 53, "198.19.1.11:9000")
	type step struct {
		advance time.Duration
		full    bool
		want    []string // one entry per request: family and whether it reconciled
	}
	steps := []step{
		{want: []string{"IPv4 reconcile"}}, // the first sync
		{advance: 10 * time.Second},
		{advance: 19 * time.Second},
		{advance: time.Second, want: []string{"IPv4 reconcile"}},
		{advance: time.Second, full: true, want: []string{"IPv4 reconcile"}},
		{advance: time.Second},
	}
	for i, s := range steps {
		f.clock.Step(s.advance)
		f.sync(servicemap.ChangeSet{Full: s.full}, dns)
		var got []string
		for _, r := range f.table.TakeRequests() {
			desc := r.Family.String()
			if r.Reconcile != nil {
				desc += " reconcile"
			}
			got = append(got, desc)
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("step %d: requests (-want +got):\n%s", i, diff)
		}
	}
}

func TestCleanerLocalRelays(t *testing.T) {
	tests := []struct {
		name  string
		bound func() ([]uint16, error)
		want  []string
	}{
		{
			name:  "flows to a dead relay port go, flows to a live one stay",
			bound: func() ([]uint16, error) { return []uint16{41000}, nil },
			want:  []string{"udp 198.19.0.2:40001 -> 198.18.0.10:53 (reply from 198.19.0.1:41000)"},
		},
		{
			name:  "unknown bound ports: only the other checks run",
			bound: func() ([]uint16, error) { return nil, errors.New("no /proc") },
			want: []string{
				"udp 198.19.0.2:40001 -> 198.18.0.10:53 (reply from 198.19.0.1:41000)",
				"udp 198.19.0.2:40002 -> 198.18.0.10:53 (reply from 198.19.0.1:39999)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, conntrack.Config{Dataplane: conntrack.LocalRelays, BoundUDPPorts: tt.bound})
			f.table.Add(
				flow(conntrack.UDP, "198.19.0.2:40001", "198.18.0.10:53", "198.19.0.1:41000"), // the relay now
				flow(conntrack.UDP, "198.19.0.2:40002", "198.18.0.10:53", "198.19.0.1:39999"), // a relay before a restart
				flow(conntrack.UDP, "198.19.0.2:40003", "198.18.0.10:53", "198.19.1.11:9000"), // left by kernel NAT
				flow(conntrack.UDP, "198.19.0.2:40004", "198.18.0.10:53", "198.18.0.10:53"),   // sent before any portal
			)
			f.sync(servicemap.ChangeSet{Full: true}, servicePort("dns", v1.ProtocolUDP, "198.18.0.10", 53, "198.19.1.11:9000"))
			if diff := cmp.Diff(tt.want, flowStrings(f.table.Flows())); diff != "" {
				t.Errorf("flows left (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCleanerDataplaneStopped: when relays stop, every UDP flow to a
// service destination goes, wherever it was redirected, so none keeps
// pointing at a freed proxy port; flows to other destinations and the
// kernel modes' flows stay.
func TestCleanerDataplaneStopped(t *testing.T) {
	flows := []conntrack.Flow{
		flow(conntrack.UDP, "198.19.0.2:40001", "198.18.0.10:53", "198.19.0.1:41000"),   // to a relay
		flow(conntrack.UDP, "198.19.0.2:40002", "198.19.0.1:30053", "198.19.0.1:41002"), // node port to a relay
		flow(conntrack.UDP, "198.19.0.2:40003", "198.18.0.77:53", "198.19.0.1:41004"),   // not a service
	}
	tests := []struct {
		name      string
		dataplane conntrack.Dataplane
		want      []string
	}{
		{
			name:      "relays",
			dataplane: conntrack.LocalRelays,
			want:      []string{"udp 198.19.0.2:40003 -> 198.18.0.77:53 (reply from 198.19.0.1:41004)"},
		},
		{
			name:      "kernel NAT",
			dataplane: conntrack.KernelNAT,
			want:      flowStrings(flows),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, conntrack.Config{Dataplane: tt.dataplane, BoundUDPPorts: func() ([]uint16, error) { return []uint16{41000, 41002, 41004}, nil }})
			dns := servicePort("dns", v1.ProtocolUDP, "198.18.0.10", 53, "198.19.1.11:9000")
			testkit.NodePort(30053)(dns)
			f.sync(servicemap.ChangeSet{Full: true}, dns)
			f.table.Add(flows...)
			_, ctx := ktesting.NewTestContext(t)
			n, err := f.cleaner.DataplaneStopped(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, flowStrings(f.table.Flows())); diff != "" {
				t.Errorf("flows left (-want +got):\n%s", diff)
			}
			if want := len(flows) - len(tt.want); n != want {
				t.Errorf("DataplaneStopped says %d flows went, want %d", n, want)
			}
		})
	}
}

func TestNewRequiresTable(t *testing.T) {
	if _, err := conntrack.New(conntrack.Config{}); err == nil {
		t.Error("New without a table succeeded, want an error")
	}
}
