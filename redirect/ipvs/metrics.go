package ipvs

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// modeMetrics are the IPVS mode's metrics: kube-proxy's names where
// kube-proxy has one, kproxy_ipvs_* for the rest.
type modeMetrics struct {
	virtualServers     *prometheus.GaugeVec
	realServers        *prometheus.GaugeVec
	draining           *prometheus.GaugeVec
	reconcileFailures  *prometheus.CounterVec
	restoreFailures    prometheus.Counter
	rulesTotal         *prometheus.GaugeVec
	conflictingServers *prometheus.GaugeVec
}

func newModeMetrics(reg prometheus.Registerer) (*modeMetrics, error) {
	fam := []string{"ip_family"}
	m := &modeMetrics{
		virtualServers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kproxy", Name: "ipvs_virtual_servers",
			Help: "IPVS virtual servers the last sync wanted",
		}, fam),
		realServers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kproxy", Name: "ipvs_real_servers",
			Help: "IPVS real servers (weight > 0) the last sync wanted, over all virtual servers",
		}, fam),
		draining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kproxy", Name: "ipvs_real_servers_draining",
			Help: "Removed TCP real servers kept at weight 0 until their connections end",
		}, fam),
		reconcileFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kproxy", Name: "ipvs_reconcile_failures_total",
			Help: "Syncs or drain passes in which some IPVS, address or ipset operation failed",
		}, fam),
		restoreFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_iptables_restore_failures_total",
			Help: "Cumulative proxy iptables restore failures",
		}),
		rulesTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_iptables_total",
			Help: "Total number of iptables rules owned by kube-proxy",
		}, []string{"table", "ip_family"}),
		conflictingServers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kproxy", Name: "ipvs_conflicting_virtual_servers",
			Help: "Virtual servers wanted by more than one service port (the first keeps it)",
		}, fam),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.virtualServers, m.realServers, m.draining, m.reconcileFailures,
		m.restoreFailures, m.rulesTotal, m.conflictingServers} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, nil
}
