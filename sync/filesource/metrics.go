package filesource

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	rejected prometheus.Counter
	invalid  prometheus.Gauge
	reloads  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kproxy_services_file_rejected_documents_total",
			Help: "Documents of the services file rejected, counted on every (re)load that rejects them.",
		}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kproxy_services_file_invalid_documents",
			Help: "Documents of the services file that are currently invalid (their last good version, if any, stays in force).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kproxy_services_file_reloads_total",
			Help: "Reads of the services file, by result: error when any file or document was rejected.",
		}, []string{"result"}),
	}
	// Both results exist from the start so rate() works before the first error.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("error")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.rejected, m.invalid, m.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering services-file metrics: %w", err)
		}
	}
	return m, nil
}
