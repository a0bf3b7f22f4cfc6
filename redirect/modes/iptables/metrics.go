package iptables

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/metrics"
)

// modeVecs are kube-proxy's iptables-mode metrics, under its names and
// with its ip_family label; each family syncs through its own view
// (forFamily).
type modeVecs struct {
	restore                *metrics.IPTablesRestore
	partialRestoreFailures *k8smetrics.CounterVec
	fullDuration           *k8smetrics.HistogramVec
	partialDuration        *k8smetrics.HistogramVec
	portErrors             *k8smetrics.CounterVec
}

// modeMetrics is one family's view of modeVecs: the Prometheus metrics
// component-base created.
type modeMetrics struct {
	*metrics.IPTablesRestoreFamily
	partialRestoreFailures prometheus.Counter
	fullDuration           prometheus.Observer
	partialDuration        prometheus.Observer
	portErrors             prometheus.Counter
}

func newModeMetrics(reg prometheus.Registerer) (*modeVecs, error) {
	fam := []string{"ip_family"}
	// kube-proxy's buckets: 1 ms doubling to about 16 s.
	buckets := k8smetrics.ExponentialBuckets(0.001, 2, 15)
	m := &modeVecs{
		partialRestoreFailures: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_iptables_partial_restore_failures_total",
			Help: "Cumulative proxy iptables partial restore failures", StabilityLevel: k8smetrics.ALPHA,
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
			Namespace: "kproxy", Name: "iptables_service_port_errors_total",
			Help: "Service ports the iptables rule model rejected (they keep their previous rules)", StabilityLevel: k8smetrics.ALPHA,
		}, fam),
	}
	var err error
	if m.restore, err = metrics.NewIPTablesRestore(reg, true); err != nil {
		return nil, err
	}
	if err := metrics.Register(reg, m.partialRestoreFailures, m.fullDuration, m.partialDuration, m.portErrors); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *modeVecs) forFamily(fam ipfamily.Family) *modeMetrics {
	f := string(fam)
	return &modeMetrics{
		IPTablesRestoreFamily:  m.restore.For(fam),
		partialRestoreFailures: m.partialRestoreFailures.CounterVec.WithLabelValues(f),
		fullDuration:           m.fullDuration.HistogramVec.WithLabelValues(f),
		partialDuration:        m.partialDuration.HistogramVec.WithLabelValues(f),
		portErrors:             m.portErrors.CounterVec.WithLabelValues(f),
	}
}

// countingTables counts the rules each restore writes, for
// kubeproxy_sync_proxy_rules_iptables_last.
type countingTables struct {
	Tables
	met *modeMetrics
}

func (t countingTables) Restore(ctx context.Context, payload []byte) error {
	err := t.Tables.Restore(ctx, payload)
	if err == nil {
		t.met.Restored(payload)
	}
	return err
}
