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
	// rejectedFiles and heldFiles count files not applied as a whole
	// (empty, unreadable, or holding a document that cannot be parsed).
	rejectedFiles prometheus.Counter
	heldFiles     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	// Declared through component-base (ALPHA, as every kproxy metric);
	// the fields are the Prometheus metrics it creates.
	counter := func(name, help string, labels ...string) *k8smetrics.CounterVec {
		return k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{Name: name, Help: help, StabilityLevel: k8smetrics.ALPHA}, labels)
	}
	gauge := func(name, help string) *k8smetrics.GaugeVec {
		return k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{Name: name, Help: help, StabilityLevel: k8smetrics.ALPHA}, nil)
	}
	rejected := counter("kproxy_services_file_rejected_documents_total",
		"Documents of the services file rejected, counted on every (re)load that rejects them.")
	invalid := gauge("kproxy_services_file_invalid_documents",
		"Documents of the services file that are currently invalid (their last good version, if any, stays in force).")
	reloads := counter("kproxy_services_file_reloads_total",
		"Reads of the services file, by result: error when any file or document was rejected.", "result")
	rejectedFiles := counter("kproxy_services_file_rejected_files_total",
		"Services files (or the services path itself) not applied as a whole, counted on every (re)load: empty, unreadable, or holding a document that cannot be parsed. Every object of their last good version that no valid document defines stays in force.")
	heldFiles := gauge("kproxy_services_file_held_files",
		"Services files whose last good version is currently held in force because the latest read was empty, unreadable, or held a document that cannot be parsed.")
	for _, v := range []k8smetrics.Registerable{rejected, invalid, reloads, rejectedFiles, heldFiles} {
		v.Create(nil)
	}
	m := &metrics{
		rejected:      rejected.CounterVec.WithLabelValues(),
		invalid:       invalid.GaugeVec.WithLabelValues(),
		reloads:       reloads.CounterVec,
		rejectedFiles: rejectedFiles.CounterVec.WithLabelValues(),
		heldFiles:     heldFiles.GaugeVec.WithLabelValues(),
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
