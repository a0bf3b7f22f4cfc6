package metrics

import (
	"context"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// NoLocalEndpointsObserver sets kubeproxy_sync_proxy_rules_no_local_endpoints_total
// after each successful sync, counting as kube-proxy's proxiers do: per
// family, the service ports with a cluster IP of that family that have
// endpoints somewhere but none on this node for their Local internal
// ("internal") or external ("external") traffic policy. It is an
// engine.SyncObserver.
type NoLocalEndpointsObserver struct {
	Metrics  *Metrics
	NodeName string
	Families []ipfamily.Family
}

// AfterSync implements engine.SyncObserver.
func (o NoLocalEndpointsObserver) AfterSync(_ context.Context, snap *servicemap.Snapshot, _ *servicemap.ChangeSet) {
	for _, fam := range o.Families {
		internal, external := NoLocalEndpoints(snap, o.NodeName, fam)
		o.Metrics.NoLocalEndpoints.WithLabelValues("internal", string(fam)).Set(float64(internal))
		o.Metrics.NoLocalEndpoints.WithLabelValues("external", string(fam)).Set(float64(external))
	}
}

// NoLocalEndpoints counts the service ports of fam whose Local internal or
// external traffic policy leaves them without an endpoint on this node
// although they have endpoints elsewhere.
func NoLocalEndpoints(snap *servicemap.Snapshot, nodeName string, fam ipfamily.Family) (internal, external int) {
	if snap == nil {
		return 0, 0
	}
	topo := servicemap.TopologyOf(nodeName, snap)
	ipv6 := fam == ipfamily.IPv6
	for _, sp := range snap.All() {
		if !hasClusterIP(sp, fam) || (!sp.InternalPolicyLocal && !sp.ExternalPolicyLocal) {
			continue
		}
		local := sp.EligibleEndpoints(ipv6, true, topo)
		if len(local) > 0 || len(sp.EligibleEndpoints(ipv6, false, topo)) == 0 {
			// Local endpoints, or none at all (kube-proxy rejects such
			// traffic and does not count it here).
			continue
		}
		if sp.InternalPolicyLocal {
			internal++
		}
		if sp.ExternalPolicyLocal {
			external++
		}
	}
	return internal, external
}

func hasClusterIP(sp *servicemap.ServicePort, fam ipfamily.Family) bool {
	for _, ip := range sp.ClusterIPs {
		if ipfamily.Of(ip) == fam {
			return true
		}
	}
	return false
}
