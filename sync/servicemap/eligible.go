package servicemap

import (
	"cmp"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// Topology is what endpoint eligibility needs to know about this node.
type Topology struct {
	NodeName string
	Zone     string // the node's topology.kubernetes.io/zone label, "" if unknown
}

// TopologyOf reads the node facts from a snapshot; nodeName (the configured
// --hostname-override or host name) wins over the Node object's name, which
// is missing until the Node is seen.
func TopologyOf(nodeName string, snap *Snapshot) Topology {
	t := Topology{NodeName: nodeName}
	if snap != nil && snap.Node != nil {
		t.NodeName = cmp.Or(t.NodeName, snap.Node.Name)
		t.Zone = snap.Node.Labels[v1.LabelTopologyZone]
	}
	return t
}

// IsIPv6 reports whether addr is an IPv6 address, treating IPv4-mapped IPv6
// addresses (as dual-stack sockets report IPv4 peers) as IPv4.
func IsIPv6(addr netip.Addr) bool { return !addr.Unmap().Is4() }

// EligibleEndpoints returns, in the port's endpoint order, the endpoints of
// one family (ipv6) that traffic may reach, following kube-proxy's
// categorisation. local selects the Local traffic policy (the service's
// internalTrafficPolicy for traffic from inside the cluster, its
// externalTrafficPolicy for traffic from outside):
//
//   - Cluster policy: ready endpoints, narrowed by topology hints when every
//     ready endpoint carries hints and some are meant for this node (node
//     hints) or zone (zone hints); if there is no ready endpoint at all, the
//     serving-terminating ones.
//   - Local policy: this node's ready endpoints, else this node's
//     serving-terminating ones, else nothing, even when other nodes have
//     endpoints (kube-proxy drops such traffic).
//
// The decision is made per address family, since each family is a separate
// proxier in kube-proxy and a client can only reach endpoints of its own.
func (sp *ServicePort) EligibleEndpoints(ipv6, local bool, topo Topology) []Endpoint {
	if sp == nil {
		return nil
	}
	eps := make([]Endpoint, 0, len(sp.Endpoints))
	for _, ep := range sp.Endpoints {
		if IsIPv6(ep.Addr) == ipv6 {
			eps = append(eps, ep)
		}
	}
	var chosen []Endpoint
	if local {
		chosen = filterEndpoints(eps, func(ep Endpoint) bool { return ep.IsLocal && ep.Ready })
		if len(chosen) == 0 {
			chosen = filterEndpoints(eps, func(ep Endpoint) bool { return ep.IsLocal && ep.ServingTerminating() })
		}
	} else {
		hinted := topologyFilter(eps, topo)
		chosen = filterEndpoints(eps, func(ep Endpoint) bool { return ep.Ready && hinted(ep) })
		if len(chosen) == 0 {
			chosen = filterEndpoints(eps, Endpoint.ServingTerminating)
		}
	}
	return chosen
}

// ServingTerminating is the fallback kind of endpoint: still serving while
// its pod shuts down.
func (ep Endpoint) ServingTerminating() bool { return ep.Serving && ep.Terminating }

// UsesHints says whether any endpoint of sp carries topology hints, so a
// change of this node's zone can change its eligible set.
func (sp *ServicePort) UsesHints() bool {
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

// topologyFilter decides, like kube-proxy's hint handling, which ready
// endpoints topology allows: prefer-same-node when every ready endpoint has a
// node hint and one names this node, else prefer-same-zone when every ready
// endpoint has a zone hint and one names this node's zone, else all. Hints
// only narrow the set when the narrowed set is non-empty, so there is no
// fallback to do afterwards.
func topologyFilter(eps []Endpoint, topo Topology) func(Endpoint) bool {
	all := func(Endpoint) bool { return true }
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
		} else if topo.NodeName != "" && slices.Contains(ep.NodeHints, topo.NodeName) {
			forNode = true
		}
		if len(ep.ZoneHints) == 0 {
			allZone = false
		} else if topo.Zone != "" && slices.Contains(ep.ZoneHints, topo.Zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return all
	case allNode && forNode:
		return func(ep Endpoint) bool { return slices.Contains(ep.NodeHints, topo.NodeName) }
	case allZone && forZone:
		return func(ep Endpoint) bool { return slices.Contains(ep.ZoneHints, topo.Zone) }
	default:
		return all
	}
}

func filterEndpoints(eps []Endpoint, keep func(Endpoint) bool) []Endpoint {
	var out []Endpoint
	for _, ep := range eps {
		if keep(ep) {
			out = append(out, ep)
		}
	}
	return out
}
