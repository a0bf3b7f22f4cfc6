package nftcompare

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// ManyServices is a generated scenario too long to write by hand: n
// services mixing the features of the files (ClusterIP, NodePort,
// LoadBalancer, affinity, traffic policies, no endpoints, up to 40
// endpoints), so that set, map and chain ordering is exercised at more than
// toy size. Its addresses (198.18.12.0/22, 198.19.8.0/22) and node ports
// (31200 to 32000, health checks from 32000) are its own; n is at most 380.
func ManyServices(n int) *Scenario {
	s := &Scenario{
		Name:          "many-services",
		Description:   fmt.Sprintf("%d generated services mixing every feature, up to 40 endpoints each", n),
		Node:          NodeSpec{Name: "node-a", Labels: map[string]string{v1.LabelTopologyZone: "zone-a"}, Addresses: []string{"198.19.0.10", "fd00::10"}, PodCIDRs: []string{"198.19.1.0/24", "fd00::1:0/112"}},
		HostAddresses: []string{"198.19.0.10/24", "fd00::10/64"},
	}
	ready := discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	for i := range n {
		name := fmt.Sprintf("svc-%03d", i)
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "many", Name: name},
			Spec: v1.ServiceSpec{
				ClusterIP: fmt.Sprintf("198.18.%d.%d", 12+i/250, 1+i%250),
				Ports:     []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if i%3 == 0 {
			svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)})
		}
		switch i % 4 {
		case 1:
			svc.Spec.Type = v1.ServiceTypeNodePort
		case 2:
			svc.Spec.Type = v1.ServiceTypeLoadBalancer
			svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: fmt.Sprintf("198.18.%d.%d", 14+i/250, 1+i%250)}}
			if i%8 == 2 {
				svc.Spec.LoadBalancerSourceRanges = []string{"198.19.0.0/24", fmt.Sprintf("203.0.113.%d/32", i%250)}
			}
		}
		if svc.Spec.Type != "" {
			for p := range svc.Spec.Ports {
				svc.Spec.Ports[p].NodePort = int32(31200 + 2*i + p)
			}
		}
		if i%7 == 0 {
			svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(60 + i))}}
		}
		if i%13 == 5 && svc.Spec.Type != "" {
			svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
				svc.Spec.HealthCheckNodePort = int32(32000 + i) // not left to chance
			}
		}
		if i%17 == 3 {
			svc.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		}
		s.Services = append(s.Services, svc)

		if i%11 == 10 {
			continue // no endpoints
		}
		es := &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "many", Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
			AddressType: discovery.AddressTypeIPv4,
			Ports: []discovery.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To(int32(8080))},
				{Name: ptr.To("dns"), Protocol: ptr.To(v1.ProtocolUDP), Port: ptr.To(int32(5353))}},
		}
		for e := range 1 + (i*7)%40 {
			node := "node-b"
			if (i+e)%5 == 0 {
				node = "node-a"
			}
			addr := 8*256 + (i*40+e)%1024 // inside 198.19.8.0/22
			es.Endpoints = append(es.Endpoints, discovery.Endpoint{
				Addresses:  []string{fmt.Sprintf("198.19.%d.%d", addr/256, addr%256)},
				NodeName:   ptr.To(node),
				Conditions: ready,
			})
		}
		s.EndpointSlices = append(s.EndpointSlices, es)
	}
	return s
}
