package conntrack

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// protocolOf maps a service port's protocol to conntrack's numbering.
func protocolOf(p v1.Protocol) (Protocol, bool) {
	switch p {
	case v1.ProtocolTCP:
		return TCP, true
	case v1.ProtocolUDP:
		return UDP, true
	case v1.ProtocolSCTP:
		return SCTP, true
	}
	return 0, false
}

// cleanedProtocol returns the protocol of a service port whose flows cleanup
// looks after: UDP and SCTP. TCP is left to the kernel.
func cleanedProtocol(name servicemap.ServicePortName) (Protocol, bool) {
	p, ok := protocolOf(name.Protocol)
	return p, ok && p != TCP
}

// destinationsOf lists where clients reach sp: each cluster, external and
// load-balancer IP with the service port, and the node port in each family
// the service has a cluster IP of (modes program node ports per family of
// the service, as kube-proxy's per-family proxiers do).
func destinationsOf(sp *servicemap.ServicePort) []Destination {
	var out []Destination
	for _, list := range [][]netip.Addr{sp.ClusterIPs, sp.ExternalIPs, sp.LoadBalancerIPs} {
		for _, ip := range list {
			out = append(out, ServiceAddress(netip.AddrPortFrom(ip, sp.Port)))
		}
	}
	if sp.NodePort != 0 {
		for _, fam := range familiesOf(sp) {
			out = append(out, NodePortOf(fam, sp.NodePort))
		}
	}
	slices.SortFunc(out, compareDestinations)
	return slices.Compact(out)
}

// familiesOf lists the families of sp's cluster IPs.
func familiesOf(sp *servicemap.ServicePort) []ipfamily.Family {
	var fams []ipfamily.Family
	for _, ip := range sp.ClusterIPs {
		if f := ipfamily.Of(ip); !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	return fams
}

// servingEndpoints lists the serving endpoints of sp in family fam.
func servingEndpoints(sp *servicemap.ServicePort, fam ipfamily.Family) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ep := range sp.Endpoints {
		if ep.Serving && ipfamily.Of(ep.Addr) == fam {
			out = append(out, netip.AddrPortFrom(ep.Addr.Unmap(), ep.Port))
		}
	}
	return out
}

// serves says whether endpoint ep is a serving endpoint of sp.
func serves(sp *servicemap.ServicePort, ep netip.AddrPort) bool {
	return slices.Contains(servingEndpoints(sp, ipfamily.Of(ep.Addr())), netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port()))
}
