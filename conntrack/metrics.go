package conntrack

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// cleanupMetrics are the Cleaner's counters.
type cleanupMetrics struct {
	deleted  prometheus.Counter
	failures prometheus.Counter
	duration prometheus.Histogram
}

func newCleanupMetrics(reg prometheus.Registerer) (*cleanupMetrics, error) {
	m := &cleanupMetrics{
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kproxy", Subsystem: "conntrack", Name: "flows_deleted_total",
			Help: "Stale UDP and SCTP conntrack flows deleted after syncs and by reconciliation",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kproxy", Subsystem: "conntrack", Name: "cleanup_failures_total",
			Help: "Conntrack cleanup passes that failed (retried after the next sync)",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "kproxy", Subsystem: "conntrack", Name: "cleanup_duration_seconds",
			Help:    "Time to clean conntrack after one sync, over every family's table",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms to about 16 s
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.deleted, m.failures, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering conntrack metrics: %w", err)
		}
	}
	return m, nil
}
