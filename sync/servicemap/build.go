package servicemap

import (
	"cmp"
	"slices"
)

// buildServicePorts attaches endpoints from slices (sorted by slice name, so
// de-duplication is deterministic) to copies of the service's port
// templates. The result is sorted by name.
func buildServicePorts(templates []*ServicePort, entries []*sliceEntry) []*ServicePort {
	// One allocation for all of a service's ports: they live and die together
	// unless a later snapshot shares one, which only keeps a few siblings alive.
	values := make([]ServicePort, len(templates))
	out := make([]*ServicePort, len(templates))
	for i, tmpl := range templates {
		values[i] = *tmpl
		values[i].Endpoints = endpointsFor(tmpl.Name, entries)
		out[i] = &values[i]
	}
	slices.SortFunc(out, func(a, b *ServicePort) int { return a.Name.Compare(b.Name) })
	return out
}

// endpointsFor merges the endpoints every slice offers for one service port:
// the slice port with the same name and protocol gives the target port, so
// named target ports resolve per pod. A port served by one slice port shares
// that slice port's (immutable) list.
func endpointsFor(name ServicePortName, entries []*sliceEntry) []Endpoint {
	var only []Endpoint
	matches, n := 0, 0
	for _, e := range entries {
		for i := range e.ports {
			if sp := &e.ports[i]; sp.name == name.Port && sp.protocol == name.Protocol && len(sp.endpoints) > 0 {
				only = sp.endpoints
				matches++
				n += len(sp.endpoints)
			}
		}
	}
	if matches <= 1 {
		return only
	}
	eps := make([]Endpoint, 0, n)
	for _, e := range entries {
		for i := range e.ports {
			if sp := &e.ports[i]; sp.name == name.Port && sp.protocol == name.Protocol {
				eps = append(eps, sp.endpoints...)
			}
		}
	}
	return sortAndDedup(eps)
}

// sortAndDedup sorts eps by address and port, keeping the input order of
// equal entries so that de-duplication is deterministic.
func sortAndDedup(eps []Endpoint) []Endpoint {
	if !slices.IsSortedFunc(eps, compareEndpointAddr) {
		slices.SortStableFunc(eps, compareEndpointAddr)
	}
	return dedupEndpoints(eps)
}

func compareEndpointAddr(a, b Endpoint) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// dedupEndpoints keeps one endpoint per address:port of a sorted list. An
// endpoint may briefly sit in two slices, or a terminating pod's IP may be
// reused: like kube-proxy, prefer a non-terminating one, then (as the
// node's own view is authoritative) a local one, then the earliest slice.
func dedupEndpoints(eps []Endpoint) []Endpoint {
	out := eps[:0]
	for i := 0; i < len(eps); {
		best, j := i, i+1
		for ; j < len(eps) && compareEndpointAddr(eps[i], eps[j]) == 0; j++ {
			if dedupRank(eps[j]) > dedupRank(eps[best]) {
				best = j
			}
		}
		out = append(out, eps[best])
		i = j
	}
	return slices.Clip(out)
}

func dedupRank(e Endpoint) int {
	r := 0
	if !e.Terminating {
		r += 2
	}
	if e.IsLocal {
		r++
	}
	return r
}

// servicePortEqual says two versions of a service port program the same thing.
func servicePortEqual(a, b *ServicePort) bool {
	if a == b {
		return true
	}
	return a.Name == b.Name && a.Port == b.Port && a.NodePort == b.NodePort &&
		a.AffinityTimeout == b.AffinityTimeout && a.InternalPolicyLocal == b.InternalPolicyLocal &&
		a.ExternalPolicyLocal == b.ExternalPolicyLocal && a.HealthCheckNodePort == b.HealthCheckNodePort &&
		slices.Equal(a.ClusterIPs, b.ClusterIPs) && slices.Equal(a.ExternalIPs, b.ExternalIPs) &&
		slices.Equal(a.HiddenExternalIPs, b.HiddenExternalIPs) &&
		slices.Equal(a.LoadBalancerIPs, b.LoadBalancerIPs) &&
		slices.Equal(a.LoadBalancerSourceRanges, b.LoadBalancerSourceRanges) &&
		slices.EqualFunc(a.Endpoints, b.Endpoints, endpointEqual)
}

func endpointEqual(a, b Endpoint) bool {
	return a.Addr == b.Addr && a.Port == b.Port && a.Ready == b.Ready && a.Serving == b.Serving &&
		a.Terminating == b.Terminating && a.NodeName == b.NodeName && a.Zone == b.Zone &&
		a.IsLocal == b.IsLocal && slices.Equal(a.ZoneHints, b.ZoneHints) && slices.Equal(a.NodeHints, b.NodeHints)
}

// HasServingEndpoint says whether any endpoint of p can take traffic.
func (p *ServicePort) HasServingEndpoint() bool {
	for i := range p.Endpoints {
		if p.Endpoints[i].Serving {
			return true
		}
	}
	return false
}

// staleEndpoints lists the serving endpoints of old that are gone from cur, or
// no longer serving there. Both lists are sorted and unique by address:port.
func staleEndpoints(name ServicePortName, old, cur []Endpoint, out []StaleEndpoint) []StaleEndpoint {
	j := 0
	for _, ep := range old {
		if !ep.Serving {
			continue // nothing was sent to it, so nothing can be stale
		}
		for j < len(cur) && compareEndpointAddr(cur[j], ep) < 0 {
			j++
		}
		if j < len(cur) && compareEndpointAddr(cur[j], ep) == 0 && cur[j].Serving {
			continue
		}
		out = append(out, StaleEndpoint{ServicePort: name, Endpoint: ep})
	}
	return out
}

// applyEdits returns prev (sorted by name) with removed names dropped, added
// ports inserted and updated ports replaced, without touching prev: earlier
// snapshots share it. removed and added must be sorted; cost is one copy of
// the pointer slice plus a binary search per edit.
func applyEdits(prev []*ServicePort, removed []ServicePortName, added, updated []*ServicePort) []*ServicePort {
	if len(removed) == 0 && len(added) == 0 && len(updated) == 0 {
		return prev
	}
	find := func(list []*ServicePort, name ServicePortName) (int, bool) {
		return slices.BinarySearchFunc(list, name, func(p *ServicePort, n ServicePortName) int { return p.Name.Compare(n) })
	}
	out := make([]*ServicePort, 0, len(prev)-len(removed)+len(added))
	pos, ri, ai := 0, 0, 0
	for ri < len(removed) || ai < len(added) {
		nextRem, nextIns := len(prev), len(prev)
		if ri < len(removed) {
			if i, ok := find(prev, removed[ri]); ok {
				nextRem = i
			} else {
				ri++ // not there: nothing to drop
				continue
			}
		}
		if ai < len(added) {
			nextIns, _ = find(prev, added[ai].Name)
		}
		if ai < len(added) && nextIns <= nextRem {
			out = append(out, prev[pos:max(pos, nextIns)]...)
			pos = max(pos, nextIns)
			out = append(out, added[ai])
			ai++
			continue
		}
		out = append(out, prev[pos:nextRem]...)
		pos = nextRem + 1
		ri++
	}
	out = append(out, prev[pos:]...)
	for _, p := range updated {
		if i, ok := find(out, p.Name); ok {
			out[i] = p
		}
	}
	return out
}
