package lbmetrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// numReasons is how many reasons Reasons lists; TestWithPortCountsBothWays
// checks the two agree.
const numReasons = 7

// Reasons lists the rejection reasons the relays count.
func Reasons() []string {
	return []string{ReasonNoEndpoints, ReasonDirect, ReasonFDExhausted, ReasonDialFailed, ReasonSourceRange, ReasonLoop, ReasonPortFull}
}

// PortCounters are one service port's relay counters, summed over its
// relays: plain atomics, so a relay pays one more atomic add per event and
// readers (/services, ServiceCollector) never stop it.
type PortCounters struct {
	// Connections are TCP connections and SCTP associations relayed;
	// Flows are UDP flows started.
	Connections, Flows atomic.Uint64
	// Active are the connections, associations and flows open now.
	Active                                       atomic.Int64
	DialFailures, BytesToEndpoint, BytesToClient atomic.Uint64
	// refused is indexed as Reasons.
	refused [numReasons]atomic.Uint64
}

// Refused returns the refusals counted, by reason; reasons never seen are
// left out.
func (c *PortCounters) Refused() map[string]uint64 {
	var out map[string]uint64
	for i, r := range Reasons() {
		if n := c.refused[i].Load(); n > 0 {
			if out == nil {
				out = map[string]uint64{}
			}
			out[r] = n
		}
	}
	return out
}

// WithPort returns metrics whose handles of protocol (a Protocol* value: a
// service port has one) count into c as well as into m's series, for the
// relays of one service port. A node may run tens of thousands of relays, so
// this costs three allocations, not one per handle.
func (m *Metrics) WithPort(protocol string, c *PortCounters) *Metrics {
	if m == nil {
		m = Discard()
	}
	t := &portTees{}
	out := *m
	out.port = m.For(protocol).withPort(c, t)
	if protocol == ProtocolUDP {
		t.flowsActive = teeGauge{m.UDPFlowsActive, &c.Active}
		t.flows = teeCounter{m.UDPFlowsTotal, &c.Flows}
		out.UDPFlowsActive, out.UDPFlowsTotal = &t.flowsActive, &t.flows
	}
	return &out
}

// portTees holds one service port's tee handles in one allocation; the
// handles point into it.
type portTees struct {
	active, flowsActive teeGauge
	counters            [4 + numReasons]teeCounter
	flows               teeCounter
}

func (p *Protocol) withPort(c *PortCounters, t *portTees) *Protocol {
	out := *p
	t.active = teeGauge{p.ConnectionsActive, &c.Active}
	out.ConnectionsActive = &t.active
	slots := [4 + numReasons]*prometheus.Counter{&out.ConnectionsTotal, &out.BytesToEndpoint, &out.BytesToClient, &out.DialFailures,
		&out.RejectedNoEndpoints, &out.RejectedDirect, &out.RejectedFDExhausted,
		&out.RejectedDialFailed, &out.RejectedSourceRange, &out.RejectedLoop, &out.RejectedPortFull}
	owns := [4 + numReasons]*atomic.Uint64{&c.Connections, &c.BytesToEndpoint, &c.BytesToClient, &c.DialFailures}
	for i := range numReasons {
		owns[4+i] = &c.refused[i]
	}
	for i, slot := range slots {
		t.counters[i] = teeCounter{*slot, owns[i]}
		*slot = &t.counters[i]
	}
	return &out
}

// teeCounter and teeGauge add to a port's atomic what they add to the
// shared series.
type teeCounter struct {
	prometheus.Counter
	own *atomic.Uint64
}

func (t teeCounter) Inc() { t.Counter.Inc(); t.own.Add(1) }

func (t teeCounter) Add(v float64) {
	t.Counter.Add(v)
	if v > 0 {
		t.own.Add(uint64(v))
	}
}

type teeGauge struct {
	prometheus.Gauge
	own *atomic.Int64
}

func (t teeGauge) Inc()          { t.Gauge.Inc(); t.own.Add(1) }
func (t teeGauge) Dec()          { t.Gauge.Dec(); t.own.Add(-1) }
func (t teeGauge) Add(v float64) { t.Gauge.Add(v); t.own.Add(int64(v)) }
func (t teeGauge) Sub(v float64) { t.Gauge.Sub(v); t.own.Add(-int64(v)) }

// ServicePort is one service port's counters as ServiceCollector exports
// them: Service is "namespace/name:port" (kube-proxy's port name),
// Protocol a Protocol* value.
type ServicePort struct {
	Service, Protocol string
	Counters          *PortCounters
}

// ServiceCollector exports PortCounters per service port
// (--userspace-service-metrics). Series are made at scrape time from the
// ports each lists, so a service port that goes away leaves none behind.
// Per TCP or SCTP port: connections_total, active, dial_failures_total,
// bytes_total (two directions); per UDP port udp_flows_total instead of
// connections_total; plus rejected_total for each reason seen.
type ServiceCollector struct {
	each                                                         func(yield func(ServicePort))
	connections, flows, active, dialFailures, bytes, rejectedTot *prometheus.Desc
}

// NewServiceCollector exports the ports each yields at every scrape.
func NewServiceCollector(each func(yield func(ServicePort))) *ServiceCollector {
	desc := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), "[ALPHA] "+help,
			append([]string{"service", LabelProtocol}, extra...), nil)
	}
	return &ServiceCollector{
		each:         each,
		connections:  desc("service_connections_total", "Connections (TCP) and associations (SCTP) relayed, per service port."),
		flows:        desc("service_udp_flows_total", "UDP flows started, per service port."),
		active:       desc("service_active", "Connections, associations and UDP flows open now, per service port."),
		dialFailures: desc("service_dial_failures_total", "Failed attempts to reach an endpoint, per service port."),
		bytes:        desc("service_bytes_total", "Payload bytes relayed, per service port and direction.", LabelDirection),
		rejectedTot:  desc("service_rejected_total", "Clients refused, per service port and reason (reasons seen only).", LabelReason),
	}
}

// Describe implements prometheus.Collector.
func (s *ServiceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.connections, s.flows, s.active, s.dialFailures, s.bytes, s.rejectedTot} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *ServiceCollector) Collect(ch chan<- prometheus.Metric) {
	s.each(func(p ServicePort) {
		c := p.Counters
		counter := func(d *prometheus.Desc, v uint64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{p.Service, p.Protocol}, extra...)...)
		}
		if p.Protocol == ProtocolUDP {
			counter(s.flows, c.Flows.Load())
		} else {
			counter(s.connections, c.Connections.Load())
		}
		ch <- prometheus.MustNewConstMetric(s.active, prometheus.GaugeValue, float64(c.Active.Load()), p.Service, p.Protocol)
		counter(s.dialFailures, c.DialFailures.Load())
		counter(s.bytes, c.BytesToEndpoint.Load(), DirectionToEndpoint)
		counter(s.bytes, c.BytesToClient.Load(), DirectionToClient)
		for reason, n := range c.Refused() {
			counter(s.rejectedTot, n, reason)
		}
	})
}
