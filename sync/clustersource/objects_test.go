package clustersource

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// service returns a ClusterIP Service with one TCP port 80 → 8080.
func service(ns, name, clusterIP string, lbls map[string]string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Spec: v1.ServiceSpec{
			Type:      v1.ServiceTypeClusterIP,
			ClusterIP: clusterIP,
			Selector:  map[string]string{"app": name},
			Ports: []v1.ServicePort{{
				Name: "http", Protocol: v1.ProtocolTCP, Port: 80,
			}},
		},
	}
}

// endpointSlice returns an IPv4 slice of service svc with one ready
// endpoint per address, all on port 8080 named "http".
func endpointSlice(ns, name, svc string, lbls map[string]string, addrs ...string) *discovery.EndpointSlice {
	l := map[string]string{discovery.LabelServiceName: svc}
	for k, v := range lbls {
		l[k] = v
	}
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		AddressType: discovery.AddressTypeIPv4,
		Ports: []discovery.EndpointPort{{
			Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080),
		}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{a},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return s
}

func node(name string, addrs ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
	}
	return n
}
