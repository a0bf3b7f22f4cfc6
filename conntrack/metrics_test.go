package conntrack_test

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestReconcilerMetrics: kube-proxy's conntrack reconciler metrics count,
// per family, the passes that reconcile and what they deleted; passes that
// only clean up after a sync do not count.
func TestReconcilerMetrics(t *testing.T) {
	f := newFixture(t, conntrack.Config{Dataplane: conntrack.KernelNAT, ReconcileInterval: 30 * time.Second})
	dns := servicePort("dns", v1.ProtocolUDP, "198.18.0.10", 53, "198.19.1.11:9000")
	// A flow to an endpoint the service does not have: reconciliation
	// deletes it.
	f.table.Add(flow(conntrack.UDP, "198.19.0.5:4000", "198.18.0.10:53", "198.19.1.99:9000"))
	f.sync(servicemap.ChangeSet{}, dns) // the first sync reconciles
	f.clock.Step(time.Second)
	f.sync(servicemap.ChangeSet{}, dns) // too soon: no reconciliation

	count, deleted := reconcilerSamples(t, f)
	if count != 1 || deleted != 1 {
		t.Errorf("IPv4 reconciler: %d passes observed, %v flows deleted; want 1 and 1", count, deleted)
	}
}

func reconcilerSamples(t *testing.T, f *fixture) (count uint64, deleted float64) {
	t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ipv4 := func(m *dto.Metric) bool {
		for _, l := range m.GetLabel() {
			if l.GetName() == "ip_family" && l.GetValue() == "IPv4" {
				return true
			}
		}
		return false
	}
	seen := 0
	for _, fam := range families {
		for _, m := range fam.GetMetric() {
			if !ipv4(m) {
				continue
			}
			switch fam.GetName() {
			case "kubeproxy_conntrack_reconciler_sync_duration_seconds":
				count, seen = m.GetHistogram().GetSampleCount(), seen+1
			case "kubeproxy_conntrack_reconciler_deleted_entries_total":
				deleted, seen = m.GetCounter().GetValue(), seen+1
			}
		}
	}
	if seen != 2 {
		t.Fatalf("found %d of kube-proxy's two conntrack reconciler metrics for IPv4", seen)
	}
	return count, deleted
}
