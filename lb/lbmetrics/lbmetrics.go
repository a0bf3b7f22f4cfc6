// Package lbmetrics holds the userspace data plane's Prometheus metrics,
// shared by the TCP, UDP and SCTP relays. Relays take per-protocol handles
// (For) once, at construction, so the hot paths never look labels up.
package lbmetrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"
)

const namespace = "kproxy"
const subsystem = "userspace"

// Label names.
const (
	LabelProtocol  = "protocol"
	LabelDirection = "direction"
	LabelReason    = "reason"
)

// Protocol label values.
const (
	ProtocolTCP  = "tcp"
	ProtocolUDP  = "udp"
	ProtocolSCTP = "sctp"
)

// Direction label values of BytesTotal.
const (
	DirectionToEndpoint = "to_endpoint"
	DirectionToClient   = "to_client"
)

// Reason label values of RejectedTotal.
const (
	// ReasonNoEndpoints: the service port has no usable endpoint.
	ReasonNoEndpoints = "no_endpoints"
	// ReasonDirect: the client reached the proxy port without going through
	// a portal (open-relay protection), or its original destination could
	// not be read.
	ReasonDirect = "direct"
	// ReasonFDExhausted: the process ran out of file descriptors.
	ReasonFDExhausted = "fd_exhausted"
	// ReasonDialFailed: every endpoint tried refused or timed out.
	ReasonDialFailed = "dial_failed"
	// ReasonSourceRange: the client's address is outside the
	// loadBalancerSourceRanges of the LoadBalancer IP it addressed (TCP:
	// reset at accept; UDP: the datagram is dropped).
	ReasonSourceRange = "source_range"
	// ReasonLoop: the connection came from one of the relays' own
	// outgoing connections: an endpoint leads back into kproxy.
	ReasonLoop = "loop"
	// ReasonPortFull: the service port holds its share of the process's
	// descriptors (fdbudget.Port), in all or waiting for a connect.
	ReasonPortFull = "service_port_full"
)

// Metrics is the data plane's metric set. Create it once per process with New
// and hand it to every relay.
type Metrics struct {
	ConnectionsActive *prometheus.GaugeVec   // {protocol}
	ConnectionsTotal  *prometheus.CounterVec // {protocol}
	BytesTotal        *prometheus.CounterVec // {protocol,direction}
	DialFailuresTotal *prometheus.CounterVec // {protocol}: failed dial attempts, one per endpoint tried
	RejectedTotal     *prometheus.CounterVec // {protocol,reason}
	AcceptErrorsTotal *prometheus.CounterVec // {protocol}
	// KeptSourceTotal and KeepSourceFailuresTotal count the dials made
	// from the client's own address (lb/keepsource), and those that fell
	// back to the node's address because that failed.
	KeptSourceTotal         *prometheus.CounterVec // {protocol}
	KeepSourceFailuresTotal *prometheus.CounterVec // {protocol}

	UDPFlowsActive        prometheus.Gauge
	UDPFlowsTotal         prometheus.Counter
	UDPFlowEvictionsTotal prometheus.Counter

	// SCTPUnservedServicePorts is the number of SCTP service ports the data
	// plane cannot serve (the kernel has no SCTP sockets).
	SCTPUnservedServicePorts prometheus.Gauge

	perProtocol map[string]*Protocol
	// port, when set, are one protocol's handles that also count into a
	// service port's counters (WithPort).
	port *Protocol
}

// Protocol is one protocol's pre-curried handles: plain counters and gauges,
// no label lookup per use.
type Protocol struct {
	ConnectionsActive  prometheus.Gauge
	ConnectionsTotal   prometheus.Counter
	BytesToEndpoint    prometheus.Counter
	BytesToClient      prometheus.Counter
	DialFailures       prometheus.Counter
	AcceptErrors       prometheus.Counter
	KeptSource         prometheus.Counter
	KeepSourceFailures prometheus.Counter

	RejectedNoEndpoints prometheus.Counter
	RejectedDirect      prometheus.Counter
	RejectedFDExhausted prometheus.Counter
	RejectedDialFailed  prometheus.Counter
	RejectedSourceRange prometheus.Counter
	RejectedLoop        prometheus.Counter
	RejectedPortFull    prometheus.Counter

	protocol string
	rejected *prometheus.CounterVec
}

// New creates the metrics and registers them on reg. A nil reg leaves them
// unregistered (tests, benchmarks).
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ConnectionsActive:        gaugeVec("connections_active", "Proxied connections currently open, by protocol.", LabelProtocol),
		ConnectionsTotal:         counterVec("connections_total", "Connections proxied to an endpoint, by protocol.", LabelProtocol),
		BytesTotal:               counterVec("bytes_total", "Payload bytes relayed, by protocol and direction (to_endpoint, to_client).", LabelProtocol, LabelDirection),
		DialFailuresTotal:        counterVec("dial_failures_total", "Failed attempts to connect to an endpoint, by protocol (one per endpoint tried).", LabelProtocol),
		RejectedTotal:            counterVec("rejected_total", "Client connections refused, by protocol and reason (no_endpoints, direct, fd_exhausted, dial_failed, source_range, loop, service_port_full).", LabelProtocol, LabelReason),
		AcceptErrorsTotal:        counterVec("accept_errors_total", "Errors accepting client connections, by protocol.", LabelProtocol),
		KeptSourceTotal:          counterVec("kept_source_total", "Connections and UDP flows dialled to an endpoint on this node from the client's own address, by protocol.", LabelProtocol),
		KeepSourceFailuresTotal:  counterVec("keep_source_failures_total", "Dials that should have kept the client's address but could not, and dialled from the node's, by protocol.", LabelProtocol),
		UDPFlowsActive:           gaugeVec("udp_flows_active", "UDP flows currently in the flow tables.").WithLabelValues(),
		UDPFlowsTotal:            counterVec("udp_flows_total", "UDP flows created.").WithLabelValues(),
		UDPFlowEvictionsTotal:    counterVec("udp_flow_evictions_total", "UDP flows closed to make room for a new one: a flow table full, the flows' share of descriptors used up, or the client at its own share (idle expiry is not counted).").WithLabelValues(),
		SCTPUnservedServicePorts: gaugeVec("sctp_unserved_service_ports", "SCTP service ports that cannot be served because the kernel has no SCTP sockets.").WithLabelValues(),
		perProtocol:              make(map[string]*Protocol, 3),
	}
	// Curry the known protocols up front: their series exist (at 0) from the
	// start and the map is read-only afterwards, so For needs no lock.
	for _, p := range []string{ProtocolTCP, ProtocolUDP, ProtocolSCTP} {
		m.perProtocol[p] = m.curry(p)
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("registering userspace data-plane metrics: %w", err)
	}
	return m, nil
}

// gaugeVec and counterVec declare a metric through component-base (ALPHA,
// as every kproxy metric) and return the Prometheus vector it creates, whose
// handles the relays use directly.
func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	v := k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help,
		StabilityLevel: k8smetrics.ALPHA}, labels)
	v.Create(nil)
	return v.GaugeVec
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	v := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help,
		StabilityLevel: k8smetrics.ALPHA}, labels)
	v.Create(nil)
	return v.CounterVec
}

// Discard returns metrics registered nowhere, for callers that pass none.
func Discard() *Metrics {
	m, _ := New(nil) // cannot fail without a registerer
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.ConnectionsActive, m.ConnectionsTotal, m.BytesTotal, m.DialFailuresTotal,
		m.RejectedTotal, m.AcceptErrorsTotal, m.KeptSourceTotal, m.KeepSourceFailuresTotal, m.UDPFlowsActive, m.UDPFlowsTotal,
		m.UDPFlowEvictionsTotal, m.SCTPUnservedServicePorts,
	}
}

// curry resolves every labelled series of one protocol; doing it here also
// makes the series visible at 0 before the first event.
func (m *Metrics) curry(protocol string) *Protocol {
	p := &Protocol{
		ConnectionsActive:   m.ConnectionsActive.WithLabelValues(protocol),
		ConnectionsTotal:    m.ConnectionsTotal.WithLabelValues(protocol),
		BytesToEndpoint:     m.BytesTotal.WithLabelValues(protocol, DirectionToEndpoint),
		BytesToClient:       m.BytesTotal.WithLabelValues(protocol, DirectionToClient),
		DialFailures:        m.DialFailuresTotal.WithLabelValues(protocol),
		AcceptErrors:        m.AcceptErrorsTotal.WithLabelValues(protocol),
		KeptSource:          m.KeptSourceTotal.WithLabelValues(protocol),
		KeepSourceFailures:  m.KeepSourceFailuresTotal.WithLabelValues(protocol),
		RejectedNoEndpoints: m.RejectedTotal.WithLabelValues(protocol, ReasonNoEndpoints),
		RejectedDirect:      m.RejectedTotal.WithLabelValues(protocol, ReasonDirect),
		RejectedFDExhausted: m.RejectedTotal.WithLabelValues(protocol, ReasonFDExhausted),
		RejectedDialFailed:  m.RejectedTotal.WithLabelValues(protocol, ReasonDialFailed),
		RejectedSourceRange: m.RejectedTotal.WithLabelValues(protocol, ReasonSourceRange),
		RejectedLoop:        m.RejectedTotal.WithLabelValues(protocol, ReasonLoop),
		RejectedPortFull:    m.RejectedTotal.WithLabelValues(protocol, ReasonPortFull),
		protocol:            protocol,
		rejected:            m.RejectedTotal,
	}
	return p
}

// For returns the pre-curried handles of protocol (ProtocolTCP, ProtocolUDP
// or ProtocolSCTP). Any other value gets its own handles, created here. A nil
// *Metrics yields handles registered nowhere, so relays need no nil checks.
func (m *Metrics) For(protocol string) *Protocol {
	if m == nil {
		return Discard().For(protocol)
	}
	if m.port != nil && m.port.protocol == protocol {
		return m.port
	}
	if p, ok := m.perProtocol[protocol]; ok {
		return p
	}
	return m.curry(protocol)
}

// Rejected returns the counter of one rejection reason (a Reason* constant;
// other values get their own series).
func (p *Protocol) Rejected(reason string) prometheus.Counter {
	switch reason {
	case ReasonNoEndpoints:
		return p.RejectedNoEndpoints
	case ReasonDirect:
		return p.RejectedDirect
	case ReasonFDExhausted:
		return p.RejectedFDExhausted
	case ReasonDialFailed:
		return p.RejectedDialFailed
	case ReasonSourceRange:
		return p.RejectedSourceRange
	case ReasonLoop:
		return p.RejectedLoop
	case ReasonPortFull:
		return p.RejectedPortFull
	}
	return p.rejected.WithLabelValues(p.protocol, reason)
}
