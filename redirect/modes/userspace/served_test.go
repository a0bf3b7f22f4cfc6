package userspace

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestProgrammedRelaysAndCounters: /services' view of REDIRECT-portal
// relays, the counters of a refused client, and the per-service metrics.
func TestProgrammedRelaysAndCounters(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	reg := prometheus.NewRegistry()
	m, err := New(context.Background(), Config{
		Features: features(), NodeName: "node-a", Registerer: reg, Opener: &fakeOpener{held: map[string]bool{}},
		ServiceMetrics: true,
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1")}, nil
		},
		Applier: func(ipfamily.Family) (Applier, error) { return &recordingApplier{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(service("web", "198.18.0.10", v1.ProtocolTCP, 30080))
	tr.OnEndpointSliceUpdate(slice("web", v1.ProtocolTCP, "198.19.1.11"))
	tr.OnSynced()
	sync := func() {
		t.Helper()
		snap, changes := tr.Snapshot()
		if err := m.Sync(context.Background(), snap, changes); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	name := keyOf("web", v1.ProtocolTCP, balancer.Internal).Port
	got := m.Programmed()(name)
	var relays []string
	for _, r := range got.Relays {
		relays = append(relays, fmt.Sprintf("%s %s %s %d", r.Family, r.Class, r.Portal, r.ProxyPort))
	}
	internal := m.relays[keyOf("web", v1.ProtocolTCP, balancer.Internal)]
	external := m.relays[keyOf("web", v1.ProtocolTCP, balancer.External)]
	want := fmt.Sprintf("[IPv4 internal redirect %d IPv4 external redirect %d]", internal.port, external.port)
	if fmt.Sprint(relays) != want {
		t.Errorf("relays %v, want %s", relays, want)
	}
	if got.Counters == nil || got.Counters.Connections != 0 || len(got.Counters.Refused) != 0 {
		t.Errorf("counters before any client: %+v", got.Counters)
	}

	// A client straight to the proxy port, not through a portal, is
	// refused: counted for the port.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", internal.port))
	if err == nil {
		_, _ = c.Read(make([]byte, 1))
		c.Close()
	}
	lab.Eventually(t, "the refusal to be counted", func() (bool, string) {
		got := m.Programmed()(name).Counters
		return got.Refused[lbmetrics.ReasonDirect] == 1, fmt.Sprintf("%+v", got)
	})
	wantMetric := `
# HELP kproxy_userspace_service_rejected_total [ALPHA] Clients refused, per service port and reason (reasons seen only).
# TYPE kproxy_userspace_service_rejected_total counter
kproxy_userspace_service_rejected_total{protocol="tcp",reason="direct",service="ns/web:p"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantMetric), "kproxy_userspace_service_rejected_total"); err != nil {
		t.Error(err)
	}

	tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "web"})
	sync()
	if got := m.Programmed()(name); len(got.Relays) != 0 || got.Counters != nil || got.Note == "" {
		t.Errorf("after the service's removal: %+v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "kproxy_userspace_service_rejected_total", "kproxy_userspace_service_active"); err != nil || n != 0 {
		t.Errorf("%d per-service series left after the service's removal (%v)", n, err)
	}
}
