package iptables

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/metrics"
)

// modeVecs are kube-proxy's iptables-mode metrics, under its names and
// with its ip_family label; each family syncs through its own view
// (forFamily).
type modeVecs struct {
	restore                *metrics.IPTablesRestore
	partialRestoreFailures *k8smetrics.CounterVec
	sync                   kernelmode.RuleSync
}

// modeMetrics is one family's view of modeVecs: the Prometheus metrics
// component-base created.
type modeMetrics struct {
	*metrics.IPTablesRestoreFamily
	kernelmode.SyncMetrics
	partialRestoreFailures prometheus.Counter
}

func newModeMetrics(reg prometheus.Registerer) (*modeVecs, error) {
	m := &modeVecs{
		partialRestoreFailures: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_iptables_partial_restore_failures_total",
			Help: "Cumulative proxy iptables partial restore failures", StabilityLevel: k8smetrics.ALPHA,
		}, []string{"ip_family"}),
	}
	var err error
	if m.restore, err = metrics.NewIPTablesRestore(reg, true); err != nil {
		return nil, err
	}
	if m.sync, err = kernelmode.NewRuleSync(reg, "iptables"); err != nil {
		return nil, err
	}
	if err := metrics.Register(reg, m.partialRestoreFailures); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *modeVecs) forFamily(fam ipfamily.Family) *modeMetrics {
	return &modeMetrics{
		IPTablesRestoreFamily:  m.restore.For(fam),
		SyncMetrics:            m.sync.For(fam),
		partialRestoreFailures: m.partialRestoreFailures.CounterVec.WithLabelValues(string(fam)),
	}
}

// countingTables counts the rules each restore writes, for
// kubeproxy_sync_proxy_rules_iptables_last.
type countingTables struct {
	Tables
	met *modeMetrics
}

func (t countingTables) Restore(ctx context.Context, payload []byte) error {
	err := t.Tables.Restore(ctx, payload)
	if err == nil {
		t.met.Restored(payload)
	}
	return err
}
