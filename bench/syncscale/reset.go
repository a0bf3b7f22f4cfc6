package syncscale

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
)

// ResetAPI undoes what Measure changed through the API, so the next proxy
// starts from the same objects: the changed slice gets its ten endpoints
// back, network-programming services nplBase… are deleted.
func (l *RowLab) ResetAPI(ctx context.Context, nplBase int) error {
	i := ChangedService(l.Spec.Services)
	sliceAPI := l.Client.DiscoveryV1().EndpointSlices(Namespace)
	_, orig := BulkService(i)
	current, err := sliceAPI.Get(ctx, orig.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading endpoint slice %s: %w", orig.Name, err)
	}
	orig.ResourceVersion = current.ResourceVersion
	if _, err := sliceAPI.Update(ctx, orig, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("restoring endpoint slice %s: %w", orig.Name, err)
	}
	// A proxy stopped over budget never created them: not found is fine.
	for k := nplBase; k < nplBase+l.Settings.NPLRepeats; k++ {
		name := NPLServiceName(k)
		if err := sliceAPI.Delete(ctx, name+"-1", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting endpoint slice %s-1: %w", name, err)
		}
		if err := l.Client.CoreV1().Services(Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting service %s: %w", name, err)
		}
	}
	return nil
}

// CleanAfter runs `kproxy --cleanup` and checks that the row's mode left
// nothing behind: no proxy rules in the iptables backend (in either, for
// the userspace mode), or no kube-proxy table in either family.
func CleanAfter(ctx context.Context, node *lab.Host, kproxyBin string, m Mode) error {
	if _, err := node.Exec(kproxyBin, "--cleanup"); err != nil {
		return err
	}
	backends := kernel.Backends()
	b, ok := m.Backend()
	if ok {
		backends = []kernel.Backend{b}
	}
	if _, userspace := m.Portals(); ok || userspace {
		// The userspace mode's portal rules are in whichever backend kproxy
		// picked.
		for _, b := range backends {
			dump, _, err := SaveDump(ctx, b)
			if err != nil {
				return err
			}
			if n := dump.ProxyLines(); n > 0 {
				return fmt.Errorf("kproxy --cleanup left %d proxy rule lines in iptables-%s", n, b)
			}
		}
		return nil
	}
	tables, err := NFTTables(ctx)
	if err != nil {
		return err
	}
	if hasKubeProxyTable(tables) {
		return fmt.Errorf("kproxy --cleanup left nftables tables %q", tables)
	}
	return nil
}
