package reconcile

import (
	"fmt"
	"slices"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// changedSets lists the sets of want (by index) whose members differ from
// those last applied, or that were not applied since the last read.
func (r *Reconciler) changedSets(want *desired.State) []int {
	var out []int
	for i, set := range want.Sets {
		cs := r.cur.sets[set.Spec.Name]
		if cs == nil || !cs.appliedValid || !slices.Equal(cs.applied, set.Members) {
			out = append(out, i)
		}
	}
	return out
}

// addSetMembers adds the wanted members the changed sets lack.
func (r *Reconciler) addSetMembers(want *desired.State, changed []int) []error {
	var errs []error
	for _, i := range changed {
		set := &want.Sets[i]
		cs := r.cur.sets[set.Spec.Name]
		if cs == nil {
			errs = append(errs, fmt.Errorf("ipset %s: not created", set.Spec.Name))
			continue
		}
		for _, e := range set.Members {
			if cs.members[e] {
				continue
			}
			if err := r.opts.IPSets.Add(set.Spec.Name, e); err != nil && !handles.IsSetMember(err) {
				errs = append(errs, fmt.Errorf("adding %s to ipset %s: %w", e, set.Spec.Name, err))
				continue
			}
			cs.members[e] = true
		}
	}
	return errs
}

// removeSetMembers deletes the members the changed sets should not hold,
// then records each as holding its wanted members. (Were that untrue, an
// addition or deletion failed, which fails the sync and drops the whole
// current view with the record.)
func (r *Reconciler) removeSetMembers(want *desired.State, changed []int) []error {
	var errs []error
	for _, i := range changed {
		set := &want.Sets[i]
		cs := r.cur.sets[set.Spec.Name]
		if cs == nil {
			continue
		}
		errs = append(errs, r.removeUnwantedMembers(set, cs)...)
		cs.applied, cs.appliedValid = slices.Clone(set.Members), true
	}
	return errs
}

func (r *Reconciler) removeUnwantedMembers(set *desired.Set, cs *currentSet) []error {
	if len(cs.members) == len(set.Members) {
		return nil // additions ran first, so equal sizes mean equal sets
	}
	keep := make(map[desired.Entry]bool, len(set.Members))
	for _, e := range set.Members {
		keep[e] = true
	}
	var errs []error
	for e := range cs.members {
		if keep[e] {
			continue
		}
		if err := r.opts.IPSets.Del(set.Spec.Name, e); err != nil && !handles.IsSetMember(err) {
			errs = append(errs, fmt.Errorf("deleting %s from ipset %s: %w", e, set.Spec.Name, err))
			continue
		}
		delete(cs.members, e)
	}
	return errs
}
