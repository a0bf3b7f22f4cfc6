package balancer

import (
	"net/netip"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// eligibleEndpoints returns the addresses traffic of class and family may
// reach, by kube-proxy's categorisation (servicemap.EligibleEndpoints): the
// Local policy of the class's kind (internalTrafficPolicy for Internal,
// externalTrafficPolicy for External) narrows it to this node's endpoints;
// ExternalFromNode gets the cluster-wide ones.
func eligibleEndpoints(sp *servicemap.ServicePort, class Class, fam ipfamily.Family, topo servicemap.Topology) []netip.AddrPort {
	if sp == nil {
		return nil
	}
	var local bool
	switch class {
	case Internal:
		local = sp.InternalPolicyLocal
	case External:
		local = sp.ExternalPolicyLocal
	case ExternalFromNode:
		// kube-proxy's short-circuit goes to the cluster policy's chain.
		local = false
	}
	chosen := sp.EligibleEndpoints(fam == ipfamily.IPv6, local, topo)
	if len(chosen) == 0 {
		return nil
	}
	out := make([]netip.AddrPort, len(chosen))
	for i, ep := range chosen {
		out[i] = ep.AddrPort()
	}
	return out
}
