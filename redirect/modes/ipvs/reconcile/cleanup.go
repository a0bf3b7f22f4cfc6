package reconcile

import (
	"errors"
	"fmt"
	"syscall"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// Cleanup removes everything of this family the reconciler would own: the
// virtual servers outside ExcludeCIDRs, kube-ipvs0 (with its addresses) and
// the mode's ipsets. Remove the iptables rules that match the sets first,
// or the kernel refuses to destroy them (busy). Every step runs even when
// one fails; the error joins them all. Missing pieces are not errors.
func (r *Reconciler) Cleanup() error {
	r.cur = nil
	clear(r.draining)
	var errs []error
	list, err := r.opts.IPVS.GetServices()
	if err != nil {
		errs = append(errs, fmt.Errorf("listing IPVS services: %w", err))
	}
	for _, s := range list {
		vs, ok := handles.FromService(s)
		if !ok || !r.owned(vs.Key) {
			continue
		}
		if err := r.opts.IPVS.DelService(s); err != nil && !handles.IsNoService(err) {
			errs = append(errs, fmt.Errorf("deleting IPVS service %s: %w", vs.Key, err))
		}
	}
	if err := r.opts.Link.DeleteLink(); err != nil && !errors.Is(err, syscall.ENODEV) {
		errs = append(errs, fmt.Errorf("deleting link %s: %w", handles.DummyLink, err))
	}
	for _, spec := range desired.SetSpecs(r.opts.Family) {
		if err := r.opts.IPSets.Destroy(spec.Name); err != nil && !handles.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("destroying ipset %s: %w", spec.Name, err))
		}
	}
	return errors.Join(errs...)
}
