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
	fam := []string{"ip_family"}
	syncFailures := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem: "kubeproxy", Name: "sync_proxy_rules_nftables_sync_failures_total",
		Help: "Cumulative proxy nftables sync failures", StabilityLevel: k8smetrics.ALPHA,
	}, fam)
	cleanupFailures := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem: "kubeproxy", Name: "sync_proxy_rules_nftables_cleanup_failures_total",
		Help: "Cumulative proxy nftables cleanup failures", StabilityLevel: k8smetrics.ALPHA,
	}, fam)
	if err := metrics.Register(reg, syncFailures, cleanupFailures); err != nil {
		return nil, err
	}
	rs, err := metrics.NewRuleSync(reg, "nftables")
	if err != nil {
		return nil, err
	}
	return &modeMetrics{
		syncFailures: syncFailures.CounterVec, cleanupFailures: cleanupFailures.CounterVec,
		fullDuration: rs.FullDuration.HistogramVec, partialDuration: rs.PartialDuration.HistogramVec,
		portErrors: rs.PortErrors.CounterVec,
	}, nil
}
