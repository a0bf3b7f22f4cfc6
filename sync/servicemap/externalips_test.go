package servicemap

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestIgnoreExternalIPs: with AllowServiceExternalIPs off, service ports
// carry no external IP (nothing is programmed for them), and the policy
// kube-proxy reads from the spec stays; with it on (the default) they carry
// them.
func TestIgnoreExternalIPs(t *testing.T) {
	svc := makeService("ns", "web", "198.18.0.10", withPorts(v1.ServicePort{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}))
	svc.Spec.ExternalIPs = []string{"198.19.7.7"}
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	for _, tc := range []struct {
		name   string
		ignore bool
		want   []string
	}{
		{"gate on (default)", false, []string{"198.19.7.7"}},
		{"gate off", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(testNode, nil)
			if tc.ignore {
				tr.IgnoreExternalIPs()
			}
			tr.OnServiceUpdate(svc)
			snap, _ := tr.Snapshot()
			sp, ok := snap.Get(portName("ns", "web", "http"))
			if !ok {
				t.Fatal("service port missing")
			}
			if !slices.Equal(sp.ExternalIPs, addrs(tc.want...)) {
				t.Errorf("ExternalIPs = %v, want %v", sp.ExternalIPs, tc.want)
			}
			if got := append(sp.ExternalIPs, sp.HiddenExternalIPs...); !slices.Equal(got, addrs("198.19.7.7")) {
				t.Errorf("ExternalIPs %v and HiddenExternalIPs %v, want 198.19.7.7 in one of them", sp.ExternalIPs, sp.HiddenExternalIPs)
			}
			if !sp.ExternalPolicyLocal {
				t.Error("externalTrafficPolicy Local lost: kube-proxy reads it from the spec whatever the gate")
			}
		})
	}
}
