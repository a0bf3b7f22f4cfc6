// Package servicemap turns Services, EndpointSlices and this node's Node object
// into immutable snapshots of service ports and their endpoints, interpreted the
// way kube-proxy interprets them. Every proxy mode consumes the same snapshots.
package servicemap

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultAffinityTimeout is the API's default ClientIP affinity timeout
// (sessionAffinityConfig.clientIP.timeoutSeconds), 3 hours.
const DefaultAffinityTimeout = 10800 * time.Second

// ServicePortName identifies one port of one Service. Port is the service port's
// name ("" for a single unnamed port); two ports may share a name only if their
// protocols differ, so Protocol is part of the identity.
type ServicePortName struct {
	types.NamespacedName
	Port     string
	Protocol v1.Protocol
}

// String renders the name the way kube-proxy logs it: "ns/name:port/PROTO".
func (n ServicePortName) String() string {
	return fmt.Sprintf("%s/%s:%s/%s", n.Namespace, n.Name, n.Port, n.Protocol)
}

// Compare orders names by namespace, name, port name, then protocol.
func (n ServicePortName) Compare(o ServicePortName) int {
	if c := cmp.Compare(n.Namespace, o.Namespace); c != 0 {
		return c
	}
	if c := cmp.Compare(n.Name, o.Name); c != 0 {
		return c
	}
	if c := cmp.Compare(n.Port, o.Port); c != 0 {
		return c
	}
	return cmp.Compare(n.Protocol, o.Protocol)
}

// ServicePort is one port of one Service with everything a mode needs to
// program it, including its merged, de-duplicated endpoints. Values reachable
// from a Snapshot are immutable: modes must not modify them.
type ServicePort struct {
	Name ServicePortName

	// ClusterIPs holds the service's cluster IPs, at most one per family, in
	// the order of spec.clusterIPs (the primary family first).
	ClusterIPs []netip.Addr
	Port       uint16
	// NodePort is 0 when the service has none.
	NodePort uint16
	// ExternalIPs are spec.externalIPs that parse as IPs.
	ExternalIPs []netip.Addr
	// HiddenExternalIPs are the spec.externalIPs the AllowServiceExternalIPs
	// feature gate (off) hides: nothing is programmed for them, but, as in
	// kube-proxy (whose ExternallyAccessible still counts them), they make
	// the port externally accessible, which decides its chains and
	// endpoint sets. ExternalIPs is then empty.
	HiddenExternalIPs []netip.Addr
	// LoadBalancerIPs are status.loadBalancer.ingress IPs whose ipMode is
	// VIP (or unset); ipMode Proxy ingresses are not programmed, as in kube-proxy.
	LoadBalancerIPs []netip.Addr
	// LoadBalancerSourceRanges is empty when every source is allowed.
	LoadBalancerSourceRanges []netip.Prefix

	// AffinityTimeout is non-zero exactly when ClientIP session affinity is on.
	AffinityTimeout time.Duration

	// InternalPolicyLocal is internalTrafficPolicy: Local.
	InternalPolicyLocal bool
	// ExternalPolicyLocal is externalTrafficPolicy: Local on a service that is
	// externally accessible (NodePort, LoadBalancer or externalIPs).
	ExternalPolicyLocal bool
	// HealthCheckNodePort is 0 unless the service is a LoadBalancer with
	// externalTrafficPolicy: Local.
	HealthCheckNodePort uint16

	// Endpoints are sorted by address then port, one per address:port.
	Endpoints []Endpoint
}

// Endpoint is one backend of a service port, resolved through the slice's port
// names so that named target ports work.
type Endpoint struct {
	Addr netip.Addr
	Port uint16

	// Ready, Serving and Terminating carry the EndpointSlice conditions with
	// the API's defaults applied (nil ready or serving mean true, nil
	// terminating means false).
	Ready       bool
	Serving     bool
	Terminating bool

	NodeName string
	Zone     string
	// ZoneHints and NodeHints are the topology hints (forZones, forNodes).
	ZoneHints []string
	NodeHints []string
	// IsLocal says the endpoint runs on this node.
	IsLocal bool
}

// AddrPort returns the endpoint's address and port.
func (e Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.Addr, e.Port) }

// String renders the endpoint as "ip:port" ("[ip]:port" for IPv6).
func (e Endpoint) String() string { return e.AddrPort().String() }

// NodeInfo is what the map keeps of this node's Node object.
type NodeInfo struct {
	Name      string
	Labels    map[string]string
	Addresses []netip.Addr
	// PodCIDRs is spec.podCIDRs (the NodeCIDR local-traffic detector).
	PodCIDRs []netip.Prefix
	// Deleting is set once the Node has a deletion timestamp; kube-proxy then
	// reports itself unhealthy so load balancers drain the node.
	Deleting bool
	// ToBeDeleted is set while the Node has the cluster autoscaler's
	// ToBeDeletedByClusterAutoscaler taint; kube-proxy's /healthz then
	// reports the node ineligible, so load balancers drain it first.
	ToBeDeleted bool
}

// ToBeDeletedTaint is the taint the cluster autoscaler puts on a node it is
// about to delete.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// StaleEndpoint is an endpoint that went away from a service port, or stopped
// serving, between two snapshots. Conntrack cleanup uses it.
type StaleEndpoint struct {
	ServicePort ServicePortName
	Endpoint    Endpoint
}

// ProtocolName is a port's protocol as iptables and nft spell it ("tcp",
// "udp", "sctp"); anything else is an error naming it.
func ProtocolName(p v1.Protocol) (string, error) {
	switch p {
	case v1.ProtocolTCP:
		return "tcp", nil
	case v1.ProtocolUDP:
		return "udp", nil
	case v1.ProtocolSCTP:
		return "sctp", nil
	}
	return "", fmt.Errorf("protocol %q is not TCP, UDP or SCTP", p)
}
