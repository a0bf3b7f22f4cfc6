package conntrack

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/servicemap"
)

const (
	udp  = v1.ProtocolUDP
	tcp  = v1.ProtocolTCP
	sctp = v1.ProtocolSCTP
)

func TestFiltersFor(t *testing.T) {
	// dns is a UDP port reachable every way there is.
	dns := func() svcPort {
		return port("dns", udp, 53, "198.18.0.10").external("198.18.5.1").lb("198.18.9.1").nodePort(30053)
	}
	dual := func() svcPort { return port("dual", udp, 53, "198.18.0.20", "fd00:18::20").nodePort(30054) }
	tests := []struct {
		name       string
		prev, snap *servicemap.Snapshot
		changes    servicemap.ChangeSet
		want       []string
	}{
		{
			name:    "a removed UDP port: every flow to each of its destinations",
			prev:    snapshot(1, dns().serving("198.19.1.11:9000")),
			snap:    snapshot(2),
			changes: servicemap.ChangeSet{Removed: []*servicemap.ServicePort{dns().serving("198.19.1.11:9000").sp}},
			want:    []string{"udp 198.18.0.10:53", "udp 198.18.5.1:53", "udp 198.18.9.1:53", "udp IPv4 node port 30053"},
		},
		{
			name:    "a removed SCTP port too",
			snap:    snapshot(2),
			changes: servicemap.ChangeSet{Removed: []*servicemap.ServicePort{port("assoc", sctp, 7777, "198.18.0.30").sp}},
			want:    []string{"sctp 198.18.0.30:7777"},
		},
		{
			name: "a removed TCP port: nothing, TCP is left to the kernel",
			snap: snapshot(2),
			changes: servicemap.ChangeSet{
				Removed:        []*servicemap.ServicePort{port("web", tcp, 80, "198.18.0.40").nodePort(30080).serving("198.19.1.11:8080").sp},
				StaleEndpoints: []servicemap.StaleEndpoint{stale("web", tcp, "198.19.1.11:8080")},
			},
		},
		{
			name: "an endpoint removed: the flows it answers, on every destination of its port",
			prev: snapshot(1, dns().serving("198.19.1.11:9000", "198.19.1.12:9000")),
			snap: snapshot(2, dns().serving("198.19.1.12:9000")),
			changes: servicemap.ChangeSet{
				Changed:        []servicemap.ServicePortName{portName("dns", udp)},
				StaleEndpoints: []servicemap.StaleEndpoint{stale("dns", udp, "198.19.1.11:9000")},
			},
			want: []string{
				"udp 198.18.0.10:53 answered by 198.19.1.11:9000",
				"udp 198.18.5.1:53 answered by 198.19.1.11:9000",
				"udp 198.18.9.1:53 answered by 198.19.1.11:9000",
				"udp IPv4 node port 30053 answered by 198.19.1.11:9000",
			},
		},
		{
			name: "an endpoint that stopped serving but is still listed",
			prev: snapshot(1, port("dns", udp, 53, "198.18.0.10").serving("198.19.1.11:9000", "198.19.1.12:9000")),
			snap: snapshot(2, port("dns", udp, 53, "198.18.0.10").serving("198.19.1.12:9000").notServing("198.19.1.11:9000")),
			changes: servicemap.ChangeSet{
				Changed:        []servicemap.ServicePortName{portName("dns", udp)},
				StaleEndpoints: []servicemap.StaleEndpoint{stale("dns", udp, "198.19.1.11:9000")},
			},
			want: []string{"udp 198.18.0.10:53 answered by 198.19.1.11:9000"},
		},
		{
			name: "an endpoint that serves again by this sync (changes merged after a failure) is left alone",
			prev: snapshot(1, dns().serving("198.19.1.11:9000")),
			snap: snapshot(3, dns().serving("198.19.1.11:9000")),
			changes: servicemap.ChangeSet{
				Changed:        []servicemap.ServicePortName{portName("dns", udp)},
				StaleEndpoints: []servicemap.StaleEndpoint{stale("dns", udp, "198.19.1.11:9000")},
			},
		},
		{
			name: "an IPv6 endpoint: only the IPv6 destinations it can answer",
			prev: snapshot(1, dual().serving("198.19.1.11:9000", "[fd00:19:1::11]:9000")),
			snap: snapshot(2, dual().serving("198.19.1.11:9000")),
			changes: servicemap.ChangeSet{
				Changed:        []servicemap.ServicePortName{portName("dual", udp)},
				StaleEndpoints: []servicemap.StaleEndpoint{stale("dual", udp, "[fd00:19:1::11]:9000")},
			},
			want: []string{
				"udp [fd00:18::20]:53 answered by [fd00:19:1::11]:9000",
				"udp IPv6 node port 30054 answered by [fd00:19:1::11]:9000",
			},
		},
		{
			name: "the endpoints of a removed port need nothing more than the port's own filters",
			prev: snapshot(1, dns().serving("198.19.1.11:9000")),
			snap: snapshot(2),
			changes: servicemap.ChangeSet{
				Removed:        []*servicemap.ServicePort{dns().serving("198.19.1.11:9000").sp},
				StaleEndpoints: []servicemap.StaleEndpoint{stale("dns", udp, "198.19.1.11:9000")},
			},
			want: []string{"udp 198.18.0.10:53", "udp 198.18.5.1:53", "udp 198.18.9.1:53", "udp IPv4 node port 30053"},
		},
		{
			name: "a port that got its first endpoint: the flows no NAT rewrote",
			prev: snapshot(1, dns()),
			snap: snapshot(2, dns().serving("198.19.1.11:9000")),
			changes: servicemap.ChangeSet{
				Changed:     []servicemap.ServicePortName{portName("dns", udp)},
				NewlyServed: []servicemap.ServicePortName{portName("dns", udp)},
			},
			want: []string{
				"udp 198.18.0.10:53 untranslated",
				"udp 198.18.5.1:53 untranslated",
				"udp 198.18.9.1:53 untranslated",
				"udp IPv4 node port 30053 untranslated",
			},
		},
		{
			name: "the first sync only clears untranslated flows, so healthy flows survive a restart",
			snap: snapshot(1, dual().serving("198.19.1.11:9000"), port("web", tcp, 80, "198.18.0.40").serving("198.19.1.11:8080")),
			changes: servicemap.ChangeSet{
				Full:        true,
				Changed:     []servicemap.ServicePortName{portName("dual", udp), portName("web", tcp)},
				NewlyServed: []servicemap.ServicePortName{portName("dual", udp), portName("web", tcp)},
			},
			want: []string{
				"udp 198.18.0.20:53 untranslated",
				"udp IPv4 node port 30054 untranslated",
				"udp [fd00:18::20]:53 untranslated",
				"udp IPv6 node port 30054 untranslated",
			},
		},
		{
			name: "destinations a surviving port no longer has: every flow to them",
			prev: snapshot(1, dns().serving("198.19.1.11:9000")),
			snap: snapshot(2, port("dns", udp, 53, "198.18.0.10").lb("198.18.9.1").nodePort(30055).serving("198.19.1.11:9000")),
			changes: servicemap.ChangeSet{
				Changed: []servicemap.ServicePortName{portName("dns", udp)},
			},
			want: []string{"udp 198.18.5.1:53", "udp IPv4 node port 30053"},
		},
		{
			name: "a changed port number: every flow to the old one",
			prev: snapshot(1, port("dns", udp, 53, "198.18.0.10").serving("198.19.1.11:9000")),
			snap: snapshot(2, port("dns", udp, 5353, "198.18.0.10").serving("198.19.1.11:9000")),
			changes: servicemap.ChangeSet{
				Changed: []servicemap.ServicePortName{portName("dns", udp)},
			},
			want: []string{"udp 198.18.0.10:53"},
		},
		{
			name: "removed and added back within one change set: the old state is cleared whole",
			prev: snapshot(1, dns().serving("198.19.1.11:9000")),
			snap: snapshot(3, dns().serving("198.19.1.12:9000")),
			changes: servicemap.ChangeSet{
				Changed:        []servicemap.ServicePortName{portName("dns", udp)},
				Removed:        []*servicemap.ServicePort{dns().serving("198.19.1.11:9000").sp},
				StaleEndpoints: []servicemap.StaleEndpoint{stale("dns", udp, "198.19.1.11:9000")},
				NewlyServed:    []servicemap.ServicePortName{portName("dns", udp)},
			},
			want: []string{"udp 198.18.0.10:53", "udp 198.18.5.1:53", "udp 198.18.9.1:53", "udp IPv4 node port 30053"},
		},
		{
			name: "TCP endpoint changes: nothing",
			prev: snapshot(1, port("web", tcp, 80, "198.18.0.40").serving("198.19.1.11:8080")),
			snap: snapshot(2, port("web", tcp, 80, "198.18.0.40")),
			changes: servicemap.ChangeSet{
				Changed:        []servicemap.ServicePortName{portName("web", tcp)},
				StaleEndpoints: []servicemap.StaleEndpoint{stale("web", tcp, "198.19.1.11:8080")},
			},
		},
		{
			name:    "nothing changed: nothing",
			prev:    snapshot(1, dns().serving("198.19.1.11:9000")),
			snap:    snapshot(2, dns().serving("198.19.1.11:9000")),
			changes: servicemap.ChangeSet{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strs(FiltersFor(tt.prev, tt.snap, &tt.changes))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("filters (-want +got):\n%s", diff)
			}
		})
	}
}
