package metrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/metrics"
)

func TestNoLocalEndpoints(t *testing.T) {
	remote := testkit.EP("198.19.1.10:80")
	local := testkit.EP("198.19.0.10:80", testkit.Local)
	snap := testkit.Snapshot(
		// Local internal policy, endpoints only elsewhere: counted.
		testkit.Port("ns", "internal-remote", 80, "198.18.0.1", testkit.InternalLocal(), testkit.Endpoints(remote)),
		// Local external policy, endpoints only elsewhere: counted.
		testkit.Port("ns", "external-remote", 80, "198.18.0.2", testkit.NodePort(30001), testkit.ExternalLocal(0), testkit.Endpoints(remote)),
		// Both Local, one local endpoint: not counted.
		testkit.Port("ns", "both-local", 80, "198.18.0.3", testkit.InternalLocal(), testkit.ExternalLocal(0), testkit.Endpoints(local, remote)),
		// No endpoints at all: rejected, not counted (as kube-proxy).
		testkit.Port("ns", "none", 80, "198.18.0.4", testkit.InternalLocal()),
		// Cluster policy: never counted.
		testkit.Port("ns", "cluster", 80, "198.18.0.5", testkit.Endpoints(remote)),
		// IPv6 only: counted for IPv6 alone.
		testkit.Port("ns", "v6", 80, "fd00::1", testkit.InternalLocal(), testkit.Endpoints(testkit.EP("[fd00:1::10]:80"))),
	)
	tests := []struct {
		fam                   ipfamily.Family
		wantInternal, wantExt int
	}{
		{ipfamily.IPv4, 1, 1},
		{ipfamily.IPv6, 1, 0},
	}
	m := metrics.New(ipfamily.IPv4, ipfamily.IPv6)
	metrics.NoLocalEndpointsObserver{Metrics: m, NodeName: testkit.NodeName, Families: ipfamily.All()}.AfterSync(context.Background(), snap, nil)
	for _, tt := range tests {
		internal, external := metrics.NoLocalEndpoints(snap, testkit.NodeName, tt.fam)
		if internal != tt.wantInternal || external != tt.wantExt {
			t.Errorf("%s: NoLocalEndpoints = %d internal, %d external; want %d, %d", tt.fam, internal, external, tt.wantInternal, tt.wantExt)
		}
		if got := testutil.ToFloat64(m.NoLocalEndpoints.GaugeVec.WithLabelValues("internal", string(tt.fam))); got != float64(tt.wantInternal) {
			t.Errorf("%s: gauge internal = %v, want %d", tt.fam, got, tt.wantInternal)
		}
		if got := testutil.ToFloat64(m.NoLocalEndpoints.GaugeVec.WithLabelValues("external", string(tt.fam))); got != float64(tt.wantExt) {
			t.Errorf("%s: gauge external = %v, want %d", tt.fam, got, tt.wantExt)
		}
	}
}
