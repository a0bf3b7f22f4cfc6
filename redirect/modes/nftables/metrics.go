package nftables

import (
	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"

	"kproxy.dev/kproxy/sync/metrics"
)

// modeMetrics are kube-proxy's nftables-mode metrics, under its names and
// with its ip_family label. They are declared through component-base; the
// fields are the Prometheus vectors it creates.
type modeMetrics struct {
	syncFailures    *prometheus.CounterVec
	cleanupFailures *prometheus.CounterVec
	fullDuration    *prometheus.HistogramVec
	partialDuration *prometheus.HistogramVec
	portErrors      *prometheus.CounterVec
}

func newModeMetrics(reg prometheus.Registerer) (*modeMetrics, error) {
	// kube-proxy's buckets: 1 ms doubling to about 16 s.
	buckets := k8smetrics.ExponentialBuckets(0.001, 2, 15)
	fam := []string{"ip_family"}
	v := struct {
		syncFailures, cleanupFailures, portErrors *k8smetrics.CounterVec
		fullDuration, partialDuration             *k8smetrics.HistogramVec
	}{
		syncFailures: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_nftables_sync_failures_total",
			Help: "Cumulative proxy nftables sync failures", StabilityLevel: k8smetrics.ALPHA,
		}, fam),
		cleanupFailures: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_nftables_cleanup_failures_total",
			Help: "Cumulative proxy nftables cleanup failures", StabilityLevel: k8smetrics.ALPHA,
		}, fam),
		fullDuration: k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_full_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for full resyncs", Buckets: buckets, StabilityLevel: k8smetrics.ALPHA,
		}, fam),
		partialDuration: k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_partial_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for partial resyncs", Buckets: buckets, StabilityLevel: k8smetrics.ALPHA,
		}, fam),
		portErrors: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Namespace: "kproxy", Name: "nftables_service_port_errors_total",
			Help: "Service ports the nftables rule model rejected (they keep their previous rules)", StabilityLevel: k8smetrics.ALPHA,
		}, fam),
	}
	if err := metrics.Register(reg, v.syncFailures, v.cleanupFailures, v.fullDuration, v.partialDuration, v.portErrors); err != nil {
		return nil, err
	}
	return &modeMetrics{
		syncFailures: v.syncFailures.CounterVec, cleanupFailures: v.cleanupFailures.CounterVec,
		fullDuration: v.fullDuration.HistogramVec, partialDuration: v.partialDuration.HistogramVec,
		portErrors: v.portErrors.CounterVec,
	}, nil
}
