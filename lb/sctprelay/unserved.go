package sctprelay

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/servicemap"
)

// UnservedReporter reports the SCTP service ports a kernel without SCTP
// sockets leaves unserved: the gauge holds their number and each port is
// logged once when it becomes unserved, not on every sync.
type UnservedReporter struct {
	// Logger receives the report's lines; the zero value means
	// klog.Background().
	Logger klog.Logger
	gauge  prometheus.Gauge
	logged map[servicemap.ServicePortName]struct{}
}

// NewUnservedReporter reports into gauge, normally
// (*lbmetrics.Metrics).SCTPUnservedServicePorts.
func NewUnservedReporter(gauge prometheus.Gauge) *UnservedReporter {
	return &UnservedReporter{gauge: gauge, logged: map[servicemap.ServicePortName]struct{}{}}
}

// Update takes every SCTP service port of the current snapshot, sets the
// gauge and logs the ports not reported before; it returns those, sorted.
// Ports that went away are forgotten, so one that comes back is logged
// again. Not safe for concurrent use: the mode calls it from its sync.
func (u *UnservedReporter) Update(ports []servicemap.ServicePortName) []servicemap.ServicePortName {
	current := make(map[servicemap.ServicePortName]struct{}, len(ports))
	var added []servicemap.ServicePortName
	for _, p := range ports {
		if _, dup := current[p]; dup {
			continue
		}
		current[p] = struct{}{}
		if _, seen := u.logged[p]; !seen {
			added = append(added, p)
		}
	}
	slices.SortFunc(added, servicemap.ServicePortName.Compare)
	log := u.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	for _, p := range added {
		log.Info("SCTP service port not served: the kernel has no SCTP sockets", "servicePort", p.String())
	}
	u.logged = current
	u.gauge.Set(float64(len(current)))
	return added
}
