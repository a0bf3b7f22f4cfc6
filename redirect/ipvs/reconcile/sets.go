package reconcile

import (
	"fmt"

	"kproxy.dev/kproxy/redirect/ipvs/desired"
	"kproxy.dev/kproxy/redirect/ipvs/handles"
)

func (r *Reconciler) addSetMembers(want *desired.State) []error {
	var errs []error
	for _, set := range want.Sets {
		have := r.cur.sets[set.Spec.Name]
		if have == nil {
			errs = append(errs, fmt.Errorf("ipset %s: not created", set.Spec.Name))
			continue
		}
		for _, e := range set.Members {
			if have[e] {
				continue
			}
			if err := r.opts.IPSets.Add(set.Spec.Name, e); err != nil && !handles.IsSetMember(err) {
				errs = append(errs, fmt.Errorf("adding %s to ipset %s: %w", e, set.Spec.Name, err))
				continue
			}
			have[e] = true
		}
	}
	return errs
}

func (r *Reconciler) removeSetMembers(want *desired.State) []error {
	var errs []error
	for _, set := range want.Sets {
		have := r.cur.sets[set.Spec.Name]
		if len(have) == len(set.Members) {
			continue // additions ran first, so equal sizes mean equal sets
		}
		keep := make(map[desired.Entry]bool, len(set.Members))
		for _, e := range set.Members {
			keep[e] = true
		}
		for e := range have {
			if keep[e] {
				continue
			}
			if err := r.opts.IPSets.Del(set.Spec.Name, e); err != nil && !handles.IsSetMember(err) {
				errs = append(errs, fmt.Errorf("deleting %s from ipset %s: %w", e, set.Spec.Name, err))
				continue
			}
			delete(have, e)
		}
	}
	return errs
}
