package conntrack

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"

	"kproxy.dev/kproxy/sync/metrics"
)

// cleanupMetrics are the Cleaner's counters: kproxy's own, over every
// pass, and kube-proxy's conntrack reconciler metrics, by ip_family, over
// the passes that reconcile (kproxy's reconciliation shares a pass with the
// sync's cleanup, whose deletions count there too).
type cleanupMetrics struct {
	deleted  prometheus.Counter
	failures prometheus.Counter
	duration prometheus.Observer

	reconcileDuration *prometheus.HistogramVec
	reconcileDeleted  *prometheus.CounterVec
}

func newCleanupMetrics(reg prometheus.Registerer) (*cleanupMetrics, error) {
	// Declared through component-base (ALPHA, as every kproxy metric);
	// the fields are the Prometheus metrics it creates.
	deleted := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Namespace: "kproxy", Subsystem: "conntrack", Name: "flows_deleted_total", StabilityLevel: k8smetrics.ALPHA,
		Help: "Stale UDP and SCTP conntrack flows deleted after syncs and by reconciliation",
	}, nil)
	failures := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Namespace: "kproxy", Subsystem: "conntrack", Name: "cleanup_failures_total", StabilityLevel: k8smetrics.ALPHA,
		Help: "Conntrack cleanup passes that failed (retried after the next sync)",
	}, nil)
	duration := k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
		Namespace: "kproxy", Subsystem: "conntrack", Name: "cleanup_duration_seconds", StabilityLevel: k8smetrics.ALPHA,
		Help:    "Time to clean conntrack after one sync, over every family's table",
		Buckets: k8smetrics.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms to about 16 s
	}, nil)
	metrics.Create(deleted, failures, duration)
	m := &cleanupMetrics{
		deleted:  deleted.CounterVec.WithLabelValues(),
		failures: failures.CounterVec.WithLabelValues(),
		duration: duration.HistogramVec.WithLabelValues(),
	}
	reconcileDuration := k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
		Subsystem: "kubeproxy", Name: "conntrack_reconciler_sync_duration_seconds",
		Help:    "ReconcileConntrackFlowsLatency latency in seconds",
		Buckets: k8smetrics.ExponentialBuckets(0.001, 2, 15), StabilityLevel: k8smetrics.ALPHA,
	}, []string{"ip_family"})
	reconcileDeleted := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem: "kubeproxy", Name: "conntrack_reconciler_deleted_entries_total",
		Help: "Cumulative conntrack flows deleted by conntrack reconciler", StabilityLevel: k8smetrics.ALPHA,
	}, []string{"ip_family"})
	if err := metrics.Register(reg, reconcileDuration, reconcileDeleted); err != nil {
		return nil, fmt.Errorf("registering conntrack metrics: %w", err)
	}
	m.reconcileDuration, m.reconcileDeleted = reconcileDuration.HistogramVec, reconcileDeleted.CounterVec
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{deleted.CounterVec, failures.CounterVec, duration.HistogramVec} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering conntrack metrics: %w", err)
		}
	}
	return m, nil
}
