// Package metrics holds kproxy's Prometheus metrics: kube-proxy's sync and
// health metrics under their kube-proxy names, plus kproxy's own. Everything
// lives on a private registry so tests and several instances never collide.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const (
	kubeProxySubsystem = "kubeproxy"
	kproxyNamespace    = "kproxy"
)

// Metrics is the set of sync and health metrics. Other packages register
// their own collectors on Registry.
type Metrics struct {
	registry *prometheus.Registry

	// SyncDuration is how long each call into the mode took.
	SyncDuration prometheus.Histogram
	// SyncLastTimestamp is the Unix time of the last successful sync.
	SyncLastTimestamp prometheus.Gauge
	// LastQueuedTimestamp is the Unix time a sync was last asked for.
	LastQueuedTimestamp prometheus.Gauge
	// NetworkProgrammingDuration is the time from an EndpointSlice's
	// last-change-trigger-time to the sync that programmed it.
	NetworkProgrammingDuration prometheus.Histogram

	ServiceChangesTotal    prometheus.Counter
	ServiceChangesPending  prometheus.Gauge
	EndpointChangesTotal   prometheus.Counter
	EndpointChangesPending prometheus.Gauge

	// HealthzTotal and LivezTotal count responses by HTTP status code.
	HealthzTotal *prometheus.CounterVec
	LivezTotal   *prometheus.CounterVec

	// SyncFailuresTotal counts mode syncs that returned an error.
	SyncFailuresTotal prometheus.Counter
	// EventToSyncDuration is the time from receiving a source event to the
	// end of the mode sync that applied it.
	EventToSyncDuration prometheus.Histogram
	// ServicePorts and Endpoints describe the last successfully synced snapshot.
	ServicePorts prometheus.Gauge
	Endpoints    prometheus.Gauge
}

// networkProgrammingBuckets are kube-proxy's: 0.25s and 0.5s, every second to
// 59s, every 5s to 115s, then every 30s to 5 minutes.
func networkProgrammingBuckets() []float64 {
	b := []float64{0.25, 0.5}
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	return append(b, prometheus.LinearBuckets(120, 30, 7)...)
}

// New returns the metrics registered on a new registry that also carries the
// Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		SyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "sync_proxy_rules_duration_seconds",
			Help:      "SyncProxyRules latency in seconds",
			// 1ms doubling to about 16s, as kube-proxy.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		SyncLastTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "sync_proxy_rules_last_timestamp_seconds",
			Help:      "The last time proxy rules were successfully synced",
		}),
		LastQueuedTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "sync_proxy_rules_last_queued_timestamp_seconds",
			Help:      "The last time a sync of proxy rules was queued",
		}),
		NetworkProgrammingDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "network_programming_duration_seconds",
			Help:      "In Cluster Network Programming Latency in seconds",
			Buckets:   networkProgrammingBuckets(),
		}),
		ServiceChangesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "sync_proxy_rules_service_changes_total",
			Help:      "Cumulative proxy rules Service changes",
		}),
		ServiceChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "sync_proxy_rules_service_changes_pending",
			Help:      "Pending proxy rules Service changes",
		}),
		EndpointChangesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "sync_proxy_rules_endpoint_changes_total",
			Help:      "Cumulative proxy rules Endpoint changes",
		}),
		EndpointChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "sync_proxy_rules_endpoint_changes_pending",
			Help:      "Pending proxy rules Endpoint changes",
		}),
		HealthzTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "proxy_healthz_total",
			Help:      "Cumulative proxy healthz HTTP status",
		}, []string{"code"}),
		LivezTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "proxy_livez_total",
			Help:      "Cumulative proxy livez HTTP status",
		}, []string{"code"}),
		SyncFailuresTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: kproxyNamespace,
			Name:      "sync_failures_total",
			Help:      "Mode syncs that failed and were scheduled for retry",
		}),
		EventToSyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: kproxyNamespace,
			Name:      "event_to_sync_duration_seconds",
			Help:      "Time from receiving a Service, EndpointSlice, Node or file event to the end of the mode sync that applied it, in seconds",
			// 1ms doubling to about 9 minutes: covers sub-millisecond local
			// syncs as well as slow periodic ones.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}),
		ServicePorts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: kproxyNamespace,
			Name:      "service_ports",
			Help:      "Service ports in the last successfully synced snapshot",
		}),
		Endpoints: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: kproxyNamespace,
			Name:      "endpoints",
			Help:      "Endpoints, summed over service ports, in the last successfully synced snapshot",
		}),
	}
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.SyncDuration, m.SyncLastTimestamp, m.LastQueuedTimestamp, m.NetworkProgrammingDuration,
		m.ServiceChangesTotal, m.ServiceChangesPending, m.EndpointChangesTotal, m.EndpointChangesPending,
		m.HealthzTotal, m.LivezTotal,
		m.SyncFailuresTotal, m.EventToSyncDuration, m.ServicePorts, m.Endpoints,
	)
	return m
}

// Registry is where other packages register their own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the registry in the Prometheus exposition format, for /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}
