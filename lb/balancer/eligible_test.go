package balancer

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestEligibleEndpoints checks which endpoints a fresh picker offers (its
// first Pick lists every eligible endpoint, starting with the first).
func TestEligibleEndpoints(t *testing.T) {
	local, remote := onNode(thisNode), onNode("node-b")
	tests := []struct {
		name   string
		svc    *v1.Service
		slices []*discovery.EndpointSlice
		zone   string // this node's zone label, "" for no Node object
		key    Key
		want   []netip.AddrPort
	}{{
		name: "no endpoints: empty",
		svc:  service("s"),
		key:  key("s", Internal, ipfamily.IPv4),
	}, {
		name:   "unknown service port: empty",
		svc:    service("s"),
		key:    key("other", Internal, ipfamily.IPv4),
		slices: []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.1"))},
	}, {
		name:   "ready endpoints only, in address order",
		svc:    service("s"),
		slices: []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.3"), ep("198.19.1.1"), ep("198.19.1.2", notReady))},
		key:    key("s", Internal, ipfamily.IPv4),
		want:   aps("198.19.1.1:8080", "198.19.1.3:8080"),
	}, {
		name: "serving-terminating ignored while any endpoint is ready",
		svc:  service("s"),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", servingTerm), ep("198.19.1.2"))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.2:8080"),
	}, {
		name: "no ready endpoint: serving-terminating fallback, not the non-serving ones",
		svc:  service("s"),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", servingTerm), ep("198.19.1.2", terminatingNotServing), ep("198.19.1.3", notReady),
			ep("198.19.1.4", servingTerm))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.1:8080", "198.19.1.4:8080"),
	}, {
		name: "no ready and no serving endpoint: empty",
		svc:  service("s"),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.2", terminatingNotServing), ep("198.19.1.3", notReady))},
		key: key("s", Internal, ipfamily.IPv4),
	}, {
		name: "internalTrafficPolicy Local: only this node's endpoints",
		svc:  service("s", itpLocal),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", remote), ep("198.19.1.2", local), ep("198.19.1.3", local), ep("198.19.1.4"))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.2:8080", "198.19.1.3:8080"),
	}, {
		name: "internalTrafficPolicy Local without local endpoints: empty although others are ready",
		svc:  service("s", itpLocal),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", remote), ep("198.19.1.4"))},
		key: key("s", Internal, ipfamily.IPv4),
	}, {
		name: "internalTrafficPolicy Local: local serving-terminating fallback even with remote ready ones",
		svc:  service("s", itpLocal),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", remote), ep("198.19.1.2", local, servingTerm), ep("198.19.1.3", local, notReady))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.2:8080"),
	}, {
		name: "internalTrafficPolicy Local does not apply to external traffic",
		svc:  service("s", itpLocal),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", remote), ep("198.19.1.2", local))},
		key:  key("s", External, ipfamily.IPv4),
		want: aps("198.19.1.1:8080", "198.19.1.2:8080"),
	}, {
		name: "externalTrafficPolicy Local: external traffic to this node's endpoints",
		svc:  service("s", etpLocalNodePort),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", remote), ep("198.19.1.2", local))},
		key:  key("s", External, ipfamily.IPv4),
		want: aps("198.19.1.2:8080"),
	}, {
		name: "externalTrafficPolicy Local without local endpoints: external empty",
		svc:  service("s", etpLocalNodePort),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", remote))},
		key: key("s", External, ipfamily.IPv4),
	}, {
		name: "externalTrafficPolicy Local does not apply to cluster-IP traffic",
		svc:  service("s", etpLocalNodePort),
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", remote), ep("198.19.1.2", local))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.1:8080", "198.19.1.2:8080"),
	}, {
		name: "dual-stack: IPv4 picker gets IPv4 endpoints",
		svc:  service("s", dualStack),
		slices: []*discovery.EndpointSlice{
			slice("s", "s-v4", ep("198.19.1.1"), ep("198.19.1.2")),
			slice("s", "s-v6", ep("fd00::19:1"), ep("fd00::19:2", notReady)),
		},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.1:8080", "198.19.1.2:8080"),
	}, {
		name: "dual-stack: IPv6 picker gets IPv6 endpoints",
		svc:  service("s", dualStack),
		slices: []*discovery.EndpointSlice{
			slice("s", "s-v4", ep("198.19.1.1"), ep("198.19.1.2")),
			slice("s", "s-v6", ep("fd00::19:1"), ep("fd00::19:2", notReady)),
		},
		key:  key("s", Internal, ipfamily.IPv6),
		want: aps("[fd00::19:1]:8080"),
	}, {
		name: "dual-stack: fallback decided per family",
		svc:  service("s", dualStack),
		slices: []*discovery.EndpointSlice{
			slice("s", "s-v4", ep("198.19.1.1")),
			slice("s", "s-v6", ep("fd00::19:1", servingTerm)),
		},
		key:  key("s", Internal, ipfamily.IPv6),
		want: aps("[fd00::19:1]:8080"),
	}, {
		name: "zone hints for this node's zone narrow the set",
		svc:  service("s"),
		zone: "zone-a",
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", zoneHints("zone-a")), ep("198.19.1.2", zoneHints("zone-b")),
			ep("198.19.1.3", zoneHints("zone-a", "zone-b")))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.1:8080", "198.19.1.3:8080"),
	}, {
		name: "zone hints ignored when one ready endpoint has none",
		svc:  service("s"),
		zone: "zone-a",
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", zoneHints("zone-a")), ep("198.19.1.2"))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.1:8080", "198.19.1.2:8080"),
	}, {
		name: "zone hints ignored when none is for this node's zone",
		svc:  service("s"),
		zone: "zone-c",
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", zoneHints("zone-a")), ep("198.19.1.2", zoneHints("zone-b")))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.1:8080", "198.19.1.2:8080"),
	}, {
		name: "node hints win over zone hints",
		svc:  service("s"),
		zone: "zone-a",
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", zoneHints("zone-a"), nodeHints("node-b")),
			ep("198.19.1.2", zoneHints("zone-a"), nodeHints(thisNode)))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.2:8080"),
	}, {
		name: "hints do not apply under a Local policy",
		svc:  service("s", itpLocal),
		zone: "zone-a",
		slices: []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1", local, zoneHints("zone-b")), ep("198.19.1.2", remote, zoneHints("zone-a")))},
		key:  key("s", Internal, ipfamily.IPv4),
		want: aps("198.19.1.1:8080"),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, Config{})
			if tc.zone != "" {
				w.setZone(tc.zone)
			}
			w.apply([]*v1.Service{tc.svc}, tc.slices)
			p := w.b.Picker(tc.key)
			got := p.Pick(netip.MustParseAddr("198.19.9.9"))
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("eligible endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestZoneChangeRecomputesHintedPorts: the node's zone is not part of the
// ServicePort, so a Node update alone must refresh hinted ports.
func TestZoneChangeRecomputesHintedPorts(t *testing.T) {
	w := newWorld(t, Config{})
	w.setZone("zone-a")
	w.apply([]*v1.Service{service("s")}, []*discovery.EndpointSlice{slice("s", "s-1",
		ep("198.19.1.1", zoneHints("zone-a")), ep("198.19.1.2", zoneHints("zone-b")))})
	p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
	client := netip.MustParseAddr("198.19.9.9")
	if got := p.Pick(client); !cmp.Equal(got, aps("198.19.1.1:8080"), cmpAddrPort) {
		t.Fatalf("in zone-a: %v", got)
	}
	w.setZone("zone-b")
	w.sync()
	if got := p.Pick(client); !cmp.Equal(got, aps("198.19.1.2:8080"), cmpAddrPort) {
		t.Fatalf("after moving to zone-b: %v", got)
	}
}

var cmpAddrPort = cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })
