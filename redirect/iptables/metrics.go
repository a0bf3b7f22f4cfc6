package iptables

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// modeMetrics are kube-proxy's iptables-mode metrics, under its names.
type modeMetrics struct {
	restoreFailures        prometheus.Counter
	partialRestoreFailures prometheus.Counter
	rulesTotal             *prometheus.GaugeVec
	fullDuration           prometheus.Histogram
	partialDuration        prometheus.Histogram
	portErrors             prometheus.Counter
}

func newModeMetrics(reg prometheus.Registerer) (*modeMetrics, error) {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 18) // 1 ms to about 2 minutes
	m := &modeMetrics{
		restoreFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_iptables_restore_failures_total",
			Help: "Cumulative proxy iptables restore failures",
		}),
		partialRestoreFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_iptables_partial_restore_failures_total",
			Help: "Cumulative proxy iptables partial restore failures",
		}),
		rulesTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_iptables_total",
			Help: "Total number of iptables rules owned by kube-proxy",
		}, []string{"table", "ip_family"}),
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
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.restoreFailures, m.partialRestoreFailures, m.rulesTotal, m.fullDuration, m.partialDuration, m.portErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, nil
}
