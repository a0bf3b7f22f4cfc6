package ipvs

import (
	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/metrics"
)

// modeMetrics are the IPVS mode's metrics: kube-proxy's names where
// kube-proxy has one, kproxy_ipvs_* for the rest.
type modeVecs struct {
	restore            *metrics.IPTablesRestore
	virtualServers     *k8smetrics.GaugeVec
	realServers        *k8smetrics.GaugeVec
	draining           *k8smetrics.GaugeVec
	reconcileFailures  *k8smetrics.CounterVec
	conflictingServers *k8smetrics.GaugeVec
}

func newModeMetrics(reg prometheus.Registerer) (*modeVecs, error) {
	fam := []string{"ip_family"}
	// Every kproxy_ipvs_* gauge is an alpha one labelled by family.
	gauge := func(name, help string) *k8smetrics.GaugeVec {
		return k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
			Namespace: "kproxy", Name: name, Help: help, StabilityLevel: k8smetrics.ALPHA,
		}, fam)
	}
	m := &modeVecs{
		virtualServers: gauge("ipvs_virtual_servers", "IPVS virtual servers the last sync wanted"),
		realServers:    gauge("ipvs_real_servers", "IPVS real servers (weight > 0) the last sync wanted, over all virtual servers"),
		draining:       gauge("ipvs_real_servers_draining", "Removed TCP real servers kept at weight 0 until their connections end"),
		reconcileFailures: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Namespace: "kproxy", Name: "ipvs_reconcile_failures_total",
			Help: "Syncs or drain passes in which some IPVS, address or ipset operation failed", StabilityLevel: k8smetrics.ALPHA,
		}, fam),
		conflictingServers: gauge("ipvs_conflicting_virtual_servers", "Virtual servers wanted by more than one service port (the first keeps it)"),
	}
	var err error
	if m.restore, err = metrics.NewIPTablesRestore(reg, false); err != nil {
		return nil, err
	}
	if err := metrics.Register(reg, m.virtualServers, m.realServers, m.draining, m.reconcileFailures, m.conflictingServers); err != nil {
		return nil, err
	}
	return m, nil
}

// modeMetrics is one family's view: kube-proxy's restore failures carry
// the family; the kproxy_ipvs_* vectors are labelled at each use.
type modeMetrics struct {
	*metrics.IPTablesRestoreFamily
	virtualServers     *k8smetrics.GaugeVec
	realServers        *k8smetrics.GaugeVec
	draining           *k8smetrics.GaugeVec
	reconcileFailures  *k8smetrics.CounterVec
	conflictingServers *k8smetrics.GaugeVec
}

func (m *modeVecs) forFamily(fam ipfamily.Family) *modeMetrics {
	return &modeMetrics{
		IPTablesRestoreFamily: m.restore.For(fam),
		virtualServers:        m.virtualServers, realServers: m.realServers, draining: m.draining,
		reconcileFailures: m.reconcileFailures, conflictingServers: m.conflictingServers,
	}
}
