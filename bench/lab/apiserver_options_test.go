package lab

import (
	"context"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestAPIServerDualStackServices(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	if InFreshNetns(t) {
		return
	}
	api := StartAPIServer(t, WithDualStackServices())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dual", Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80}},
			IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack)},
	}
	created, err := api.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a dual-stack service: %v", err)
	}
	if len(created.Spec.ClusterIPs) != 2 {
		t.Fatalf("cluster IPs = %v, want one per family", created.Spec.ClusterIPs)
	}
	for i, want := range []string{ServiceCIDR, ServiceCIDR6} {
		addr, err := netip.ParseAddr(created.Spec.ClusterIPs[i])
		if err != nil || !netip.MustParsePrefix(want).Contains(addr) {
			t.Errorf("cluster IP %d = %q, want one from %s", i, created.Spec.ClusterIPs[i], want)
		}
	}
}

func TestFailedChecks(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"two failed", "[+]ping ok\n[-]etcd-readiness failed: reason withheld\n[+]log ok\n[-]poststarthook/rbac/bootstrap-roles failed: not finished\nreadyz check failed\n",
			"etcd-readiness failed: reason withheld; poststarthook/rbac/bootstrap-roles failed: not finished"},
		{"none named", "readyz check failed\n", "none named"},
		{"empty", "", "none named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := failedChecks(tc.body); got != tc.want {
				t.Errorf("failedChecks = %q, want %q", got, tc.want)
			}
		})
	}
}
