package nftables

import (
	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/metrics"
)

// modeVecs are kube-proxy's nftables-mode metrics, under its names and
// with its ip_family label. They are declared through component-base; the
// fields are the Prometheus vectors it creates.
type modeVecs struct {
	syncFailures    *prometheus.CounterVec
	cleanupFailures *prometheus.CounterVec
	sync            kernelmode.RuleSync
}

// modeMetrics is one family's view of modeVecs. Its series appear at
// their first use, as kube-proxy's do.
type modeMetrics struct {
	kernelmode.SyncMetrics
	syncFailures    *prometheus.CounterVec
	cleanupFailures *prometheus.CounterVec
}

func newModeMetrics(reg prometheus.Registerer) (*modeVecs, error) {
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
	rs, err := kernelmode.NewRuleSync(reg, "nftables")
	if err != nil {
		return nil, err
	}
	return &modeVecs{syncFailures: syncFailures.CounterVec, cleanupFailures: cleanupFailures.CounterVec, sync: rs}, nil
}

func (m *modeVecs) forFamily(fam ipfamily.Family) *modeMetrics {
	return &modeMetrics{SyncMetrics: m.sync.Lazy(fam), syncFailures: m.syncFailures, cleanupFailures: m.cleanupFailures}
}
