package syncscale

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"kproxy.dev/kproxy/sync/servicemap"
)

// The objects a row creates. Bulk services get ClusterIPs from 198.18.1.0
// upwards (198.18.0.0/24 holds the default "kubernetes" service) and
// endpoints that exist nowhere, from 198.19.2.1 upwards (198.19.0.0/24 and
// 198.19.1.0/24 are the lab's real hosts). The network-programming services
// get 198.18.255.x and the lab backend as their endpoint.
const (
	Namespace         = "default"
	PortName          = "http"
	ServicePort       = 80
	EndpointPort      = 8080
	EndpointsPerSlice = 10
	// nplServices is how many network-programming services fit in 198.18.255.0/24.
	nplServices = 254
)

// endpointHosts: fake endpoints wrap around in 198.19.2.0–198.19.253.255,
// hosts .1–.254; duplicates across services (past 6,400 services) are
// harmless, as endpoint chains are named per service port.
const (
	endpointNets  = 252
	endpointHosts = 254
)

// ServiceName is bulk service i's name.
func ServiceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// ServiceIP is bulk service i's ClusterIP, i < MaxServices.
func ServiceIP(i int) netip.Addr {
	off := 256 + i
	return netip.AddrFrom4([4]byte{198, 18, byte(off >> 8), byte(off)})
}

// EndpointIP is endpoint j of bulk service i.
func EndpointIP(i, j int) netip.Addr {
	k := i*EndpointsPerSlice + j
	return netip.AddrFrom4([4]byte{198, 19, byte(2 + (k/endpointHosts)%endpointNets), byte(1 + k%endpointHosts)})
}

// ChangeEndpoint is the endpoint the one-change measurement adds: an address
// no bulk service uses.
func ChangeEndpoint() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 255, 1}), EndpointPort)
}

// ChangedService is the bulk service the one-change measurement edits: one
// in the middle, so neither end of KUBE-SERVICES is favoured.
func ChangedService(n int) int { return n / 2 }

// NPLServiceName and NPLServiceIP name the k-th network-programming service.
func NPLServiceName(k int) string { return fmt.Sprintf("npl-%d", k) }

// NPLServiceIP is the k-th network-programming service's ClusterIP, k < 254.
func NPLServiceIP(k int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 255, byte(1 + k)}) }

// PortNameOf is the service port name kproxy and kube-proxy hash into the
// service's chain names.
func PortNameOf(service string) servicemap.ServicePortName {
	return servicemap.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: Namespace, Name: service},
		Port:           PortName,
		Protocol:       v1.ProtocolTCP,
	}
}

// NewService is a ClusterIP service with one TCP port, 80 → 8080.
func NewService(name string, ip netip.Addr) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: v1.ServiceSpec{
			Type:      v1.ServiceTypeClusterIP,
			ClusterIP: ip.String(),
			Ports: []v1.ServicePort{{Name: PortName, Port: ServicePort, Protocol: v1.ProtocolTCP,
				TargetPort: intstr.FromInt32(EndpointPort)}},
		},
	}
}

// NewSlice is the EndpointSlice of service with the given ready endpoints,
// all on port EndpointPort.
func NewSlice(service string, endpoints []netip.Addr) *discovery.EndpointSlice {
	name, port, proto := PortName, int32(EndpointPort), v1.ProtocolTCP
	slice := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: service + "-1", Namespace: Namespace,
			Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	ready := true
	for _, ip := range endpoints {
		slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{
			Addresses:  []string{ip.String()},
			Conditions: discovery.EndpointConditions{Ready: &ready},
		})
	}
	return slice
}

// BulkEndpoints are bulk service i's EndpointsPerSlice endpoints.
func BulkEndpoints(i int) []netip.Addr {
	eps := make([]netip.Addr, EndpointsPerSlice)
	for j := range eps {
		eps[j] = EndpointIP(i, j)
	}
	return eps
}

// BulkService returns bulk service i and its slice.
func BulkService(i int) (*v1.Service, *discovery.EndpointSlice) {
	name := ServiceName(i)
	return NewService(name, ServiceIP(i)), NewSlice(name, BulkEndpoints(i))
}
