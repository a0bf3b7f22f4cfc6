package filesource

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	rejected prometheus.Counter
	invalid  prometheus.Gauge
	reloads  *prometheus.CounterVec
	// rejectedFiles and heldFiles count files not applied as a whole
	// (empty, unreadable, or holding a document that cannot be parsed).
	rejectedFiles prometheus.Counter
	heldFiles     prometheus.Gauge
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
		rejectedFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kproxy_services_file_rejected_files_total",
			Help: "Services files (or the services path itself) not applied as a whole, counted on every (re)load: empty, unreadable, or holding a document that cannot be parsed. Every object of their last good version that no valid document defines stays in force.",
		}),
		heldFiles: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kproxy_services_file_held_files",
			Help: "Services files whose last good version is currently held in force because the latest read was empty, unreadable, or held a document that cannot be parsed.",
		}),
	}
	// Both results exist from the start so rate() works before the first error.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("error")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.rejected, m.invalid, m.reloads, m.rejectedFiles, m.heldFiles} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering services-file metrics: %w", err)
		}
	}
	return m, nil
}
