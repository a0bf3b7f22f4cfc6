package syncscale

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/lab"
)

// measureNPL creates network-programming service k and its slice (the lab
// backend's answer server) and times it until the client host gets the
// server's answer through the ClusterIP.
func (l *RowLab) measureNPL(ctx context.Context, proc *lab.Process, k int) (time.Duration, error) {
	if _, err := l.waitQuiet(ctx, proc); err != nil {
		return 0, err
	}
	name, vip := NPLServiceName(k), NPLServiceIP(k)
	svc, slice := NewService(name, vip), NewSlice(name, []netip.Addr{l.Server})

	t0 := time.Now()
	if _, err := l.Client.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("creating service %s: %w", name, err)
	}
	if _, err := l.Client.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("creating endpoint slice %s: %w", slice.Name, err)
	}
	answered, err := WaitAnswer(ctx, l.ClientHost, netip.AddrPortFrom(vip, ServicePort), t0.Add(l.Settings.KproxyBudget+l.Settings.KubeProxyBudget))
	if err != nil {
		if aerr := alive(proc); aerr != nil {
			return 0, fmt.Errorf("service %s: %w (%v)", name, err, aerr)
		}
		return 0, fmt.Errorf("service %s: %w", name, err)
	}
	return answered.Sub(t0), nil
}
