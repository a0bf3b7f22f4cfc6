package filesource

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"
)

type metrics struct {
	rejected prometheus.Counter
	invalid  prometheus.Gauge
	reloads  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	// Declared through component-base (ALPHA, as every kproxy metric);
	// the fields are the Prometheus metrics it creates.
	rejected := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Name: "kproxy_services_file_rejected_documents_total", StabilityLevel: k8smetrics.ALPHA,
		Help: "Documents of the services file rejected, counted on every (re)load that rejects them.",
	}, nil)
	invalid := k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Name: "kproxy_services_file_invalid_documents", StabilityLevel: k8smetrics.ALPHA,
		Help: "Documents of the services file that are currently invalid (their last good version, if any, stays in force).",
	}, nil)
	reloads := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Name: "kproxy_services_file_reloads_total", StabilityLevel: k8smetrics.ALPHA,
		Help: "Reads of the services file, by result: error when any file or document was rejected.",
	}, []string{"result"})
	for _, v := range []k8smetrics.Registerable{rejected, invalid, reloads} {
		v.Create(nil)
	}
	m := &metrics{
		rejected: rejected.CounterVec.WithLabelValues(),
		invalid:  invalid.GaugeVec.WithLabelValues(),
		reloads:  reloads.CounterVec,
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
