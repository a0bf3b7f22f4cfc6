package lbmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestWithPortCountsBothWays(t *testing.T) {
	if len(Reasons()) != numReasons {
		t.Fatalf("Reasons lists %d reasons, PortCounters has room for %d", len(Reasons()), numReasons)
	}
	m := Discard()
	var c PortCounters
	tcp, udp := m.WithPort(ProtocolTCP, &c).For(ProtocolTCP), m.WithPort(ProtocolUDP, &c)
	tcp.ConnectionsTotal.Inc()
	tcp.ConnectionsActive.Inc()
	tcp.BytesToEndpoint.Add(10)
	tcp.BytesToClient.Add(20)
	tcp.DialFailures.Inc()
	tcp.Rejected(ReasonNoEndpoints).Inc()
	tcp.RejectedLoop.Inc()
	udp.UDPFlowsTotal.Inc()
	udp.UDPFlowsActive.Inc()
	udp.UDPFlowsActive.Dec()
	for _, tc := range []struct {
		what      string
		own, want float64
		shared    float64
	}{
		{"connections", float64(c.Connections.Load()), 1, testutil.ToFloat64(m.For(ProtocolTCP).ConnectionsTotal)},
		{"active", float64(c.Active.Load()), 1, testutil.ToFloat64(m.For(ProtocolTCP).ConnectionsActive) + testutil.ToFloat64(m.UDPFlowsActive)},
		{"bytes to endpoint", float64(c.BytesToEndpoint.Load()), 10, testutil.ToFloat64(m.For(ProtocolTCP).BytesToEndpoint)},
		{"bytes to client", float64(c.BytesToClient.Load()), 20, testutil.ToFloat64(m.For(ProtocolTCP).BytesToClient)},
		{"dial failures", float64(c.DialFailures.Load()), 1, testutil.ToFloat64(m.For(ProtocolTCP).DialFailures)},
		{"flows", float64(c.Flows.Load()), 1, testutil.ToFloat64(m.UDPFlowsTotal)},
		{"refused no_endpoints", float64(c.Refused()[ReasonNoEndpoints]), 1, testutil.ToFloat64(m.For(ProtocolTCP).RejectedNoEndpoints)},
		{"refused loop", float64(c.Refused()[ReasonLoop]), 1, testutil.ToFloat64(m.For(ProtocolTCP).RejectedLoop)},
	} {
		if tc.own != tc.want || tc.shared != tc.want {
			t.Errorf("%s: port %v, shared %v, want %v in both", tc.what, tc.own, tc.shared, tc.want)
		}
	}
	if len(c.Refused()) != 2 {
		t.Errorf("refused %v, want two reasons", c.Refused())
	}
}

func TestServiceCollector(t *testing.T) {
	var web, dns PortCounters
	web.Connections.Add(3)
	web.BytesToClient.Add(7)
	web.refused[0].Add(2)
	dns.Flows.Add(5)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewServiceCollector(func(yield func(ServicePort)) {
		yield(ServicePort{Service: "ns/web:http", Protocol: ProtocolTCP, Counters: &web})
		yield(ServicePort{Service: "ns/dns", Protocol: ProtocolUDP, Counters: &dns})
	}))
	want := `
# HELP kproxy_userspace_service_connections_total [ALPHA] Connections (TCP) and associations (SCTP) relayed, per service port.
# TYPE kproxy_userspace_service_connections_total counter
kproxy_userspace_service_connections_total{protocol="tcp",service="ns/web:http"} 3
# HELP kproxy_userspace_service_udp_flows_total [ALPHA] UDP flows started, per service port.
# TYPE kproxy_userspace_service_udp_flows_total counter
kproxy_userspace_service_udp_flows_total{protocol="udp",service="ns/dns"} 5
# HELP kproxy_userspace_service_bytes_total [ALPHA] Payload bytes relayed, per service port and direction.
# TYPE kproxy_userspace_service_bytes_total counter
kproxy_userspace_service_bytes_total{direction="to_client",protocol="tcp",service="ns/web:http"} 7
kproxy_userspace_service_bytes_total{direction="to_client",protocol="udp",service="ns/dns"} 0
kproxy_userspace_service_bytes_total{direction="to_endpoint",protocol="tcp",service="ns/web:http"} 0
kproxy_userspace_service_bytes_total{direction="to_endpoint",protocol="udp",service="ns/dns"} 0
# HELP kproxy_userspace_service_rejected_total [ALPHA] Clients refused, per service port and reason (reasons seen only).
# TYPE kproxy_userspace_service_rejected_total counter
kproxy_userspace_service_rejected_total{protocol="tcp",reason="no_endpoints",service="ns/web:http"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kproxy_userspace_service_connections_total",
		"kproxy_userspace_service_udp_flows_total", "kproxy_userspace_service_bytes_total", "kproxy_userspace_service_rejected_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 11 {
		t.Errorf("%d series (%v), want 11: five per port and one refusal", n, err)
	}
}
