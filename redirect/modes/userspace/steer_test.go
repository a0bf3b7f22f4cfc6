package userspace

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/localroute/fakeroutes"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestSKLookupPortalsWithoutIPv6: on a node with IPv6 turned off (no ::1
// for the shared sockets) socket-lookup portals serve IPv4 and say IPv6 is
// not proxied, instead of failing the start.
func TestSKLookupPortalsWithoutIPv6(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/lo/disable_ipv6", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := New(context.Background(), Config{
		Features: kernel.Features{SKLookup: kernel.Support{Present: true}}, Portals: contract.PortalsSKLookup,
		NodeName: "node-a", Registerer: reg, Routes: fakeroutes.New(),
		LocalAddresses: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil },
	})
	if err != nil {
		t.Fatalf("New with IPv6 turned off: %v", err)
	}
	defer m.Close()
	if !slices.Equal(m.families, []ipfamily.Family{ipfamily.IPv4}) {
		t.Errorf("families %v, want IPv4 alone", m.families)
	}
	if got := testutil.ToFloat64(m.portalKinds.WithLabelValues("IPv4", "sklookup")); got != 1 {
		t.Errorf(`kproxy_userspace_portals{family="IPv4",portals="sklookup"} = %v, want 1`, got)
	}
	if n := testutil.CollectAndCount(m.portalKinds); n != 1 {
		t.Errorf("%d portal kind series, want the IPv4 one only", n)
	}
}
