package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// IPTablesRestore are kube-proxy's metrics of the iptables rules a mode
// writes, which its iptables and IPVS modes both export under one name.
type IPTablesRestore struct {
	// Failures counts iptables-restore runs that failed.
	Failures prometheus.Counter
	// Rules is the number of rules the mode owns, by table and ip_family.
	Rules *prometheus.GaugeVec
}

// NewIPTablesRestore declares the metrics and registers them on reg (nil:
// nowhere).
func NewIPTablesRestore(reg prometheus.Registerer) (*IPTablesRestore, error) {
	m := &IPTablesRestore{
		Failures: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_iptables_restore_failures_total",
			Help: "Cumulative proxy iptables restore failures",
		}),
		Rules: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_iptables_total",
			Help: "Total number of iptables rules owned by kube-proxy",
		}, []string{"table", "ip_family"}),
	}
	if err := Register(reg, m.Failures, m.Rules); err != nil {
		return nil, err
	}
	return m, nil
}

// Register registers each collector on reg; a nil reg registers nowhere
// (tests that do not read metrics).
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	return nil
}
