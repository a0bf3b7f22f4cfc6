package ipvs

import (
	"github.com/prometheus/client_golang/prometheus"

	"kproxy.dev/kproxy/sync/metrics"
)

// modeMetrics are the IPVS mode's metrics: kube-proxy's names where
// kube-proxy has one, kproxy_ipvs_* for the rest.
type modeMetrics struct {
	*metrics.IPTablesRestore
	virtualServers     *prometheus.GaugeVec
	realServers        *prometheus.GaugeVec
	draining           *prometheus.GaugeVec
	reconcileFailures  *prometheus.CounterVec
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
		conflictingServers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kproxy", Name: "ipvs_conflicting_virtual_servers",
			Help: "Virtual servers wanted by more than one service port (the first keeps it)",
		}, fam),
	}
	var err error
	if m.IPTablesRestore, err = metrics.NewIPTablesRestore(reg); err != nil {
		return nil, err
	}
	if err := metrics.Register(reg, m.virtualServers, m.realServers, m.draining, m.reconcileFailures, m.conflictingServers); err != nil {
		return nil, err
	}
	return m, nil
}
