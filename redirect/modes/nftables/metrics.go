package nftables

import (
	"github.com/prometheus/client_golang/prometheus"

	"kproxy.dev/kproxy/sync/metrics"
)

// modeMetrics are kube-proxy's nftables-mode metrics, under its names and
// with its ip_family label.
type modeMetrics struct {
	syncFailures    *prometheus.CounterVec
	cleanupFailures *prometheus.CounterVec
	fullDuration    *prometheus.HistogramVec
	partialDuration *prometheus.HistogramVec
	portErrors      *prometheus.CounterVec
}

func newModeMetrics(reg prometheus.Registerer) (*modeMetrics, error) {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 18) // 1 ms to about 2 minutes
	fam := []string{"ip_family"}
	m := &modeMetrics{
		syncFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_nftables_sync_failures_total",
			Help: "Cumulative proxy nftables sync failures",
		}, fam),
		cleanupFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_nftables_cleanup_failures_total",
			Help: "Cumulative proxy nftables cleanup failures",
		}, fam),
		fullDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_full_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for full resyncs", Buckets: buckets,
		}, fam),
		partialDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_partial_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for partial resyncs", Buckets: buckets,
		}, fam),
		portErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kproxy", Name: "nftables_service_port_errors_total",
			Help: "Service ports the nftables rule model rejected (they keep their previous rules)",
		}, fam),
	}
	if err := metrics.Register(reg, m.syncFailures, m.cleanupFailures, m.fullDuration, m.partialDuration, m.portErrors); err != nil {
		return nil, err
	}
	return m, nil
}
