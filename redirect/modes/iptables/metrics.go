package iptables

import (
	"github.com/prometheus/client_golang/prometheus"

	"kproxy.dev/kproxy/sync/metrics"
)

// modeMetrics are kube-proxy's iptables-mode metrics, under its names.
type modeMetrics struct {
	*metrics.IPTablesRestore
	partialRestoreFailures prometheus.Counter
	fullDuration           prometheus.Histogram
	partialDuration        prometheus.Histogram
	portErrors             prometheus.Counter
}

func newModeMetrics(reg prometheus.Registerer) (*modeMetrics, error) {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 18) // 1 ms to about 2 minutes
	m := &modeMetrics{
		partialRestoreFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_iptables_partial_restore_failures_total",
			Help: "Cumulative proxy iptables partial restore failures",
		}),
		fullDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_full_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for full resyncs", Buckets: buckets,
		}),
		partialDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_partial_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for partial resyncs", Buckets: buckets,
		}),
		portErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kproxy", Name: "iptables_service_port_errors_total",
			Help: "Service ports the iptables rule model rejected (they keep their previous rules)",
		}),
	}
	var err error
	if m.IPTablesRestore, err = metrics.NewIPTablesRestore(reg); err != nil {
		return nil, err
	}
	if err := metrics.Register(reg, m.partialRestoreFailures, m.fullDuration, m.partialDuration, m.portErrors); err != nil {
		return nil, err
	}
	return m, nil
}
