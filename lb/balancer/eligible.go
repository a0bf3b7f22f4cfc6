package balancer

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/servicemap"
)

// topology is what endpoint eligibility needs to know about this node.
type topology struct {
	nodeName string
	zone     string // the node's topology.kubernetes.io/zone label, "" if unknown
}

// topologyOf reads the node facts from a snapshot; nodeName (from Config)
// wins over the Node object's name, which is missing until the Node is seen.
func topologyOf(nodeName string, snap *servicemap.Snapshot) topology {
	t := topology{nodeName: nodeName}
	if snap != nil && snap.Node != nil {
		if t.nodeName == "" {
			t.nodeName = snap.Node.Name
		}
		t.zone = snap.Node.Labels[v1.LabelTopologyZone]
	}
	return t
}

// eligibleEndpoints returns, in the port's endpoint order, the endpoints that
// traffic of class and family may reach, following kube-proxy's
// categorisation:
//
//   - Cluster policy: ready endpoints, narrowed by topology hints when every
//     ready endpoint carries hints and some are meant for this node (node
//     hints) or zone (zone hints); if there is no ready endpoint at all, the
//     serving-terminating ones.
//   - Local policy (internalTrafficPolicy for Internal, externalTrafficPolicy
//     for External): this node's ready endpoints, else this node's
//     serving-terminating ones, else nothing, even when other nodes have
//     endpoints (kube-proxy drops such traffic).
//
// The decision is made per address family, since each family is a separate
// proxier in kube-proxy and a client can only reach endpoints of its own.
func eligibleEndpoints(sp *servicemap.ServicePort, class Class, fam Family, topo topology) []netip.AddrPort {
	if sp == nil {
		return nil
	}
	eps := make([]servicemap.Endpoint, 0, len(sp.Endpoints))
	for _, ep := range sp.Endpoints {
		if familyOf(ep.Addr) == fam {
			eps = append(eps, ep)
		}
	}
	local := sp.InternalPolicyLocal
	if class == External {
		local = sp.ExternalPolicyLocal
	}
	var chosen []servicemap.Endpoint
	if local {
		chosen = filter(eps, func(ep servicemap.Endpoint) bool { return ep.IsLocal && ep.Ready })
		if len(chosen) == 0 {
			chosen = filter(eps, func(ep servicemap.Endpoint) bool { return ep.IsLocal && servingTerminating(ep) })
		}
	} else {
		hinted := topologyFilter(eps, topo)
		chosen = filter(eps, func(ep servicemap.Endpoint) bool { return ep.Ready && hinted(ep) })
		if len(chosen) == 0 {
			chosen = filter(eps, servingTerminating)
		}
	}
	if len(chosen) == 0 {
		return nil
	}
	out := make([]netip.AddrPort, len(chosen))
	for i, ep := range chosen {
		out[i] = ep.AddrPort()
	}
	return out
}

// servingTerminating is the fallback kind of endpoint: still serving while
// its pod shuts down.
func servingTerminating(ep servicemap.Endpoint) bool { return ep.Serving && ep.Terminating }

// topologyFilter decides, like kube-proxy's hint handling, which ready
// endpoints topology allows: prefer-same-node when every ready endpoint has a
// node hint and one names this node, else prefer-same-zone when every ready
// endpoint has a zone hint and one names this node's zone, else all. Hints
// only narrow the set when the narrowed set is non-empty, so there is no
// fallback to do afterwards.
func topologyFilter(eps []servicemap.Endpoint, topo topology) func(servicemap.Endpoint) bool {
	all := func(servicemap.Endpoint) bool { return true }
	anyReady := false
	allNode, forNode := true, false
	allZone, forZone := true, false
	for _, ep := range eps {
		if !ep.Ready {
			continue
		}
		anyReady = true
		if len(ep.NodeHints) == 0 {
			allNode = false
		} else if topo.nodeName != "" && slices.Contains(ep.NodeHints, topo.nodeName) {
			forNode = true
		}
		if len(ep.ZoneHints) == 0 {
			allZone = false
		} else if topo.zone != "" && slices.Contains(ep.ZoneHints, topo.zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return all
	case allNode && forNode:
		return func(ep servicemap.Endpoint) bool { return slices.Contains(ep.NodeHints, topo.nodeName) }
	case allZone && forZone:
		return func(ep servicemap.Endpoint) bool { return slices.Contains(ep.ZoneHints, topo.zone) }
	default:
		return all
	}
}

func filter(eps []servicemap.Endpoint, keep func(servicemap.Endpoint) bool) []servicemap.Endpoint {
	var out []servicemap.Endpoint
	for _, ep := range eps {
		if keep(ep) {
			out = append(out, ep)
		}
	}
	return out
}

// usesHints says whether any endpoint of sp carries topology hints, so a
// change of this node's zone can change its eligible set.
func usesHints(sp *servicemap.ServicePort) bool {
	if sp == nil {
		return false
	}
	for _, ep := range sp.Endpoints {
		if len(ep.ZoneHints) > 0 || len(ep.NodeHints) > 0 {
			return true
		}
	}
	return false
}
