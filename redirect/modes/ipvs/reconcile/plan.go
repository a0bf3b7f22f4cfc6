package reconcile

import "kproxy.dev/kproxy/redirect/modes/ipvs/desired"

// servicePlan is what a sync must do with virtual servers.
type servicePlan struct {
	// visits are the owned wanted services syncService must see, in
	// want's order.
	visits []visit
	// unwanted are the current virtual servers nothing wants any more.
	unwanted []unwanted
	// record says the applied services can be recorded for the next sync:
	// want's services are in key order.
	record bool
}

// visit is one service to sync: want.Services[want], recorded at
// current.applied[slot], or slot -1 when not recorded.
type visit struct{ want, slot int }

// unwanted is one virtual server to delete, recorded at
// current.applied[slot], or slot -1 when not recorded.
type unwanted struct {
	key  desired.Key
	slot int
}

// planServices compares want with what the current view holds. unbound
// says this sync unbound addresses, which services that bind one must
// check.
func (r *Reconciler) planServices(want *desired.State, unbound bool) servicePlan {
	// Every current virtual server is recorded unless the view was just
	// read (or the last want was out of order).
	if len(r.cur.applied) == len(r.cur.services) {
		if p, ok := r.walk(want, unbound); ok {
			return p
		}
	}
	return r.planAll(want)
}

// walk merges want's services with the applied ones, both in key order. It
// reports false, planning nothing, when want's are out of order.
func (r *Reconciler) walk(want *desired.State, unbound bool) (servicePlan, bool) {
	applied := r.cur.applied
	p := servicePlan{record: true}
	j := 0
	for i := range want.Services {
		s := &want.Services[i]
		// After each step applied[j] sorts after the previous service, so
		// a service found there is in order; any other must be checked.
		match := j < len(applied) && applied[j].vs.Key == s.Key
		if !match {
			if i > 0 && want.Services[i-1].Key.Compare(s.Key) >= 0 {
				return servicePlan{}, false
			}
			for ; j < len(applied) && applied[j].vs.Key.Compare(s.Key) < 0; j++ {
				p.unwanted = append(p.unwanted, unwanted{applied[j].vs.Key, j})
			}
			match = j < len(applied) && applied[j].vs.Key == s.Key
		}
		switch {
		case match:
			if !applied[j].matches(s) || (unbound && s.Bind && !r.cur.addrs[s.Key.Addr]) {
				p.visits = append(p.visits, visit{i, j})
			}
			j++
		case r.owned(s.Key):
			p.visits = append(p.visits, visit{i, -1})
		}
	}
	for ; j < len(applied); j++ {
		p.unwanted = append(p.unwanted, unwanted{applied[j].vs.Key, j})
	}
	return p, true
}

// planAll visits every owned wanted service and finds the unwanted virtual
// servers among all current ones. It drops the record, which it rebuilds
// only when want's services are in key order.
func (r *Reconciler) planAll(want *desired.State) servicePlan {
	r.cur.applied = nil
	p := servicePlan{record: true}
	wantKeys := make(map[desired.Key]bool, len(want.Services))
	for i := range want.Services {
		k := want.Services[i].Key
		wantKeys[k] = true
		if i > 0 && want.Services[i-1].Key.Compare(k) >= 0 {
			p.record = false
		}
		if r.owned(k) {
			p.visits = append(p.visits, visit{i, -1})
		}
	}
	for k := range r.cur.services {
		if !wantKeys[k] {
			p.unwanted = append(p.unwanted, unwanted{k, -1})
		}
	}
	return p
}
