package catalogue

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/testkit"
)

// ServiceOpt changes a Service under construction.
type ServiceOpt func(*v1.Service)

// Service returns a ClusterIP Service ns/name with the given cluster IPs
// (primary family first) and ports; options change the rest.
func Service(ns, name string, clusterIPs []string, ports []v1.ServicePort, opts ...ServiceOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIPs: clusterIPs,
			Ports:      ports,
		},
	}
	if len(clusterIPs) > 0 {
		s.Spec.ClusterIP = clusterIPs[0]
	}
	for _, ip := range clusterIPs {
		fam := v1.IPv4Protocol
		if strings.Contains(ip, ":") {
			fam = v1.IPv6Protocol
		}
		if ip != v1.ClusterIPNone {
			s.Spec.IPFamilies = append(s.Spec.IPFamilies, fam)
		}
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// IPs is a list of addresses, for Service's clusterIPs.
func IPs(ips ...string) []string { return ips }

// Ports lists a Service's ports.
func Ports(ports ...v1.ServicePort) []v1.ServicePort { return ports }

// Port is a service port; nodePort 0 leaves it to the type (none for
// ClusterIP). The target port is the port's name, so endpoints are found
// through the EndpointSlice port of the same name.
func Port(name string, proto v1.Protocol, port, nodePort int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Protocol: proto, Port: port, NodePort: nodePort}
}

// NodePortType makes the Service a NodePort.
func NodePortType(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }

// LoadBalancer makes the Service a LoadBalancer whose status lists the
// ingress IPs (ipMode unset, that is VIP).
func LoadBalancer(ingress ...string) ServiceOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ingress {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

// ProxyIngress adds a load-balancer ingress with ipMode Proxy, which
// kube-proxy does not program.
func ProxyIngress(ip string) ServiceOpt {
	return func(s *v1.Service) {
		mode := v1.LoadBalancerIPModeProxy
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip, IPMode: &mode})
	}
}

// SourceRanges sets spec.loadBalancerSourceRanges.
func SourceRanges(cidrs ...string) ServiceOpt {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = cidrs }
}

// ExternalIPs sets spec.externalIPs.
func ExternalIPs(ips ...string) ServiceOpt {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

// ClientIPAffinity turns ClientIP session affinity on; seconds 0 keeps the
// API default (3 hours).
func ClientIPAffinity(seconds int32) ServiceOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		if seconds != 0 {
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &seconds}}
		}
	}
}

// ExternalLocal sets externalTrafficPolicy: Local, with a health-check node
// port when hc is not 0 (a LoadBalancer has one).
func ExternalLocal(hc int32) ServiceOpt {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hc
	}
}

// ExternalCluster sets externalTrafficPolicy: Cluster, the API default,
// spelled out.
func ExternalCluster(s *v1.Service) {
	s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
}

// InternalLocal sets internalTrafficPolicy: Local.
func InternalLocal(s *v1.Service) {
	p := v1.ServiceInternalTrafficPolicyLocal
	s.Spec.InternalTrafficPolicy = &p
}

// ExternalName makes the Service an ExternalName alias of host.
func ExternalName(host string) ServiceOpt {
	return func(s *v1.Service) {
		s.Spec.Type, s.Spec.ExternalName = v1.ServiceTypeExternalName, host
		s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "", nil, nil
	}
}

// Slice is the EndpointSlice of Service ns/svc for one family (taken from
// the first endpoint's address), named svc-ipv4 or svc-ipv6.
func Slice(ns, svc string, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	fam := discovery.AddressTypeIPv4
	if len(eps) > 0 && len(eps[0].Addresses) > 0 && strings.Contains(eps[0].Addresses[0], ":") {
		fam = discovery.AddressTypeIPv6
	}
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-" + strings.ToLower(string(fam)), ResourceVersion: "1",
			Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: fam,
		Endpoints:   eps,
		Ports:       ports,
	}
}

// SlicePorts lists an EndpointSlice's ports.
func SlicePorts(ports ...discovery.EndpointPort) []discovery.EndpointPort { return ports }

// SlicePort is the port name's target on every endpoint of a slice.
func SlicePort(name string, proto v1.Protocol, port int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: &name, Protocol: &proto, Port: &port}
}

// EndpointOpt changes an EndpointSlice endpoint under construction.
type EndpointOpt func(*discovery.Endpoint)

// Endpoint is a ready endpoint at addr on testkit.OtherNode (conditions
// left unset: the API reads nil ready and serving as true).
func Endpoint(addr string, opts ...EndpointOpt) discovery.Endpoint {
	node := testkit.OtherNode
	e := discovery.Endpoint{Addresses: []string{addr}, NodeName: &node}
	for _, o := range opts {
		o(&e)
	}
	return e
}

// OnThisNode puts the endpoint on testkit.NodeName.
func OnThisNode(e *discovery.Endpoint) {
	n := testkit.NodeName
	e.NodeName = &n
}

// Conditions sets the endpoint's ready, serving and terminating conditions.
func Conditions(ready, serving, terminating bool) EndpointOpt {
	return func(e *discovery.Endpoint) {
		e.Conditions = discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}
	}
}

// ServingTerminating: the pod is shutting down but still serves.
func ServingTerminating(e *discovery.Endpoint) { Conditions(false, true, true)(e) }

// NotServing: the pod is shutting down and no longer serves.
func NotServing(e *discovery.Endpoint) { Conditions(false, false, true)(e) }

// NotReady: the pod runs but fails its readiness probe.
func NotReady(e *discovery.Endpoint) { Conditions(false, false, false)(e) }

// ForZones sets the endpoint's zone hints.
func ForZones(zones ...string) EndpointOpt {
	return func(e *discovery.Endpoint) {
		e.Hints = &discovery.EndpointHints{}
		for _, z := range zones {
			e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: z})
		}
	}
}

// Node is this node's Node object: testkit.NodeName at testkit.NodeIPv4
// and testkit.NodeIPv6, in zone testkit.Zone.
func Node() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testkit.NodeName, ResourceVersion: "1",
			Labels: map[string]string{v1.LabelTopologyZone: testkit.Zone}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: testkit.NodeIPv4},
			{Type: v1.NodeInternalIP, Address: testkit.NodeIPv6},
		}},
	}
}
