package lbmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNewRegistersEverySeriesAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// 3 protocols x (active, total, 2 byte directions, dial failures, accept
	// errors, kept sources and their failures, 7 reasons) + 4 unlabelled.
	if got, want := testutil.CollectAndCount(reg), 3*15+4; got != want {
		t.Errorf("series registered = %d, want %d", got, want)
	}
	tcp := m.For(ProtocolTCP)
	tcp.ConnectionsTotal.Inc()
	tcp.BytesToClient.Add(10)
	tcp.Rejected(ReasonDirect).Inc()
	m.For(ProtocolUDP).Rejected(ReasonNoEndpoints).Add(2)

	want := `
# HELP kproxy_userspace_rejected_total [ALPHA] Client connections refused, by protocol and reason (no_endpoints, direct, fd_exhausted, dial_failed, source_range, loop, service_port_full).
# TYPE kproxy_userspace_rejected_total counter
kproxy_userspace_rejected_total{protocol="sctp",reason="dial_failed"} 0
kproxy_userspace_rejected_total{protocol="sctp",reason="direct"} 0
kproxy_userspace_rejected_total{protocol="sctp",reason="fd_exhausted"} 0
kproxy_userspace_rejected_total{protocol="sctp",reason="loop"} 0
kproxy_userspace_rejected_total{protocol="sctp",reason="no_endpoints"} 0
kproxy_userspace_rejected_total{protocol="sctp",reason="source_range"} 0
kproxy_userspace_rejected_total{protocol="sctp",reason="service_port_full"} 0
kproxy_userspace_rejected_total{protocol="tcp",reason="dial_failed"} 0
kproxy_userspace_rejected_total{protocol="tcp",reason="direct"} 1
kproxy_userspace_rejected_total{protocol="tcp",reason="fd_exhausted"} 0
kproxy_userspace_rejected_total{protocol="tcp",reason="loop"} 0
kproxy_userspace_rejected_total{protocol="tcp",reason="no_endpoints"} 0
kproxy_userspace_rejected_total{protocol="tcp",reason="source_range"} 0
kproxy_userspace_rejected_total{protocol="tcp",reason="service_port_full"} 0
kproxy_userspace_rejected_total{protocol="udp",reason="dial_failed"} 0
kproxy_userspace_rejected_total{protocol="udp",reason="direct"} 0
kproxy_userspace_rejected_total{protocol="udp",reason="fd_exhausted"} 0
kproxy_userspace_rejected_total{protocol="udp",reason="loop"} 0
kproxy_userspace_rejected_total{protocol="udp",reason="no_endpoints"} 2
kproxy_userspace_rejected_total{protocol="udp",reason="source_range"} 0
kproxy_userspace_rejected_total{protocol="udp",reason="service_port_full"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kproxy_userspace_rejected_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.BytesTotal.WithLabelValues(ProtocolTCP, DirectionToClient)); got != 10 {
		t.Errorf("tcp to_client bytes = %v, want 10", got)
	}
	if got := testutil.ToFloat64(m.ConnectionsTotal.WithLabelValues(ProtocolTCP)); got != 1 {
		t.Errorf("tcp connections = %v, want 1", got)
	}
}

func TestNewTwiceOnOneRegistryFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg); err == nil {
		t.Error("second New on the same registry succeeded, want a duplicate-registration error")
	}
}

func TestNilMetricsAndUnknownValuesDoNotPanic(t *testing.T) {
	var m *Metrics
	p := m.For(ProtocolTCP)
	p.ConnectionsActive.Inc()
	p.Rejected("some_new_reason").Inc()

	real := Discard()
	other := real.For("quic")
	other.ConnectionsTotal.Inc()
	if got := testutil.ToFloat64(real.ConnectionsTotal.WithLabelValues("quic")); got != 1 {
		t.Errorf("quic connections = %v, want 1", got)
	}
	real.For(ProtocolTCP).Rejected("other").Inc()
	if got := testutil.ToFloat64(real.RejectedTotal.WithLabelValues(ProtocolTCP, "other")); got != 1 {
		t.Errorf("tcp rejected{other} = %v, want 1", got)
	}
}
