package testkit

import (
	"net/netip"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// The node the fixtures program, and the node every other endpoint runs on.
const (
	NodeName  = "node-a"
	OtherNode = "node-b"
	NodeIPv4  = "198.19.0.1"
	NodeIPv6  = "fd00:19::1"
	// Zone is NodeName's topology zone.
	Zone = "zone-a"
)

// Addrs parses addresses; it panics on a bad one, as fixtures are constants.
func Addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// Prefixes parses prefixes; it panics on a bad one.
func Prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// PortName is the name of port port of Service ns/name.
func PortName(ns, name, port string, proto v1.Protocol) servicemap.ServicePortName {
	return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

// PortOpt changes a service port under construction.
type PortOpt func(*servicemap.ServicePort)

// Port returns service port "ns/name:http" over TCP on port, with the
// cluster IPs in clusterIPs (comma-separated, primary family first).
func Port(ns, name string, port uint16, clusterIPs string, opts ...PortOpt) *servicemap.ServicePort {
	sp := &servicemap.ServicePort{
		Name:       PortName(ns, name, "http", v1.ProtocolTCP),
		ClusterIPs: Addrs(strings.Split(clusterIPs, ",")...),
		Port:       port,
	}
	for _, o := range opts {
		o(sp)
	}
	return sp
}

// Protocol sets the port's protocol.
func Protocol(p v1.Protocol) PortOpt {
	return func(sp *servicemap.ServicePort) { sp.Name.Protocol = p }
}

// Named sets the port's name ("" for a Service's single unnamed port).
func Named(n string) PortOpt { return func(sp *servicemap.ServicePort) { sp.Name.Port = n } }

// NodePort sets the port's node port.
func NodePort(p uint16) PortOpt { return func(sp *servicemap.ServicePort) { sp.NodePort = p } }

// ExternalIPs sets spec.externalIPs.
func ExternalIPs(ips ...string) PortOpt {
	return func(sp *servicemap.ServicePort) { sp.ExternalIPs = Addrs(ips...) }
}

// LoadBalancerIPs sets the load-balancer ingress IPs.
func LoadBalancerIPs(ips ...string) PortOpt {
	return func(sp *servicemap.ServicePort) { sp.LoadBalancerIPs = Addrs(ips...) }
}

// SourceRanges sets spec.loadBalancerSourceRanges.
func SourceRanges(rs ...string) PortOpt {
	return func(sp *servicemap.ServicePort) { sp.LoadBalancerSourceRanges = Prefixes(rs...) }
}

// Affinity turns ClientIP session affinity on with timeout d.
func Affinity(d time.Duration) PortOpt {
	return func(sp *servicemap.ServicePort) { sp.AffinityTimeout = d }
}

// InternalLocal sets internalTrafficPolicy: Local.
func InternalLocal() PortOpt {
	return func(sp *servicemap.ServicePort) { sp.InternalPolicyLocal = true }
}

// ExternalLocal sets externalTrafficPolicy: Local, with a health-check node
// port when hc is not 0 (a LoadBalancer).
func ExternalLocal(hc uint16) PortOpt {
	return func(sp *servicemap.ServicePort) { sp.ExternalPolicyLocal, sp.HealthCheckNodePort = true, hc }
}

// Endpoints sets the port's endpoints.
func Endpoints(eps ...servicemap.Endpoint) PortOpt {
	return func(sp *servicemap.ServicePort) { sp.Endpoints = eps }
}

// ThreeEndpoints is 198.19.1.11-13:8080, ready on another node.
func ThreeEndpoints() PortOpt {
	return Endpoints(EP("198.19.1.11:8080"), EP("198.19.1.12:8080"), EP("198.19.1.13:8080"))
}

// EPOpt changes an endpoint under construction.
type EPOpt func(*servicemap.Endpoint)

// EP returns a ready, serving endpoint "addr:port" on OtherNode.
func EP(addrPort string, opts ...EPOpt) servicemap.Endpoint {
	ap := netip.MustParseAddrPort(addrPort)
	e := servicemap.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, NodeName: OtherNode}
	for _, o := range opts {
		o(&e)
	}
	return e
}

// Local puts the endpoint on NodeName.
func Local(e *servicemap.Endpoint) { e.IsLocal, e.NodeName = true, NodeName }

// Terminating: still serving while its pod shuts down.
func Terminating(e *servicemap.Endpoint) { e.Ready, e.Serving, e.Terminating = false, true, true }

// Gone: terminating and no longer serving.
func Gone(e *servicemap.Endpoint) { e.Ready, e.Serving, e.Terminating = false, false, true }

// ZoneHints sets the endpoint's forZones hints.
func ZoneHints(zones ...string) EPOpt { return func(e *servicemap.Endpoint) { e.ZoneHints = zones } }

// Snapshot is generation 1 of ports, seen by NodeName.
func Snapshot(ports ...*servicemap.ServicePort) *servicemap.Snapshot {
	return servicemap.NewSnapshot(1, &servicemap.NodeInfo{Name: NodeName}, ports...)
}

// NodeIP is NodeName's address in fam.
func NodeIP(fam ipfamily.Family) netip.Addr {
	if fam == ipfamily.IPv6 {
		return netip.MustParseAddr(NodeIPv6)
	}
	return netip.MustParseAddr(NodeIPv4)
}

// PodCIDR is the pods' range in fam, the fixtures' --cluster-cidr.
func PodCIDR(fam ipfamily.Family) netip.Prefix {
	if fam == ipfamily.IPv6 {
		return netip.MustParsePrefix("fd00:19:1::/64")
	}
	return netip.MustParsePrefix("198.19.1.0/24")
}

// Topology is NodeName in Zone.
func Topology() servicemap.Topology { return servicemap.Topology{NodeName: NodeName, Zone: Zone} }

// Case is one mode-specific golden case: the mode's configuration C and
// the service ports it programs.
type Case[C any] struct {
	Name   string
	Config C
	Ports  []*servicemap.ServicePort
}

// With returns c changed by change, for tables of cases.
func With[C any](c C, change func(*C)) C {
	change(&c)
	return c
}
