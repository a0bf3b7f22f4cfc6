package servicemap

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const testNode = "node-a"

func ptr[T any](v T) *T { return &v }

// svcOpt tweaks a test Service.
type svcOpt func(*v1.Service)

// makeService returns a ClusterIP service with one TCP port "http" 80->8080.
func makeService(ns, name, clusterIP string, opts ...svcOpt) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports: []v1.ServicePort{{
				Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("web"),
			}},
		},
	}
	for _, o := range opts {
		o(svc)
	}
	return svc
}

func withPorts(ports ...v1.ServicePort) svcOpt {
	return func(s *v1.Service) { s.Spec.Ports = ports }
}

func withType(t v1.ServiceType) svcOpt { return func(s *v1.Service) { s.Spec.Type = t } }

func withLabels(kv ...string) svcOpt {
	return func(s *v1.Service) { s.Labels = labelMap(kv...) }
}

func labelMap(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// epOpt tweaks one slice endpoint.
type epOpt func(*discovery.Endpoint)

func ready(b bool) epOpt       { return func(e *discovery.Endpoint) { e.Conditions.Ready = &b } }
func serving(b bool) epOpt     { return func(e *discovery.Endpoint) { e.Conditions.Serving = &b } }
func terminating(b bool) epOpt { return func(e *discovery.Endpoint) { e.Conditions.Terminating = &b } }
func onNode(n string) epOpt    { return func(e *discovery.Endpoint) { e.NodeName = &n } }
func inZone(z string) epOpt    { return func(e *discovery.Endpoint) { e.Zone = &z } }
func hints(zones []string, nodes []string) epOpt {
	return func(e *discovery.Endpoint) {
		e.Hints = &discovery.EndpointHints{}
		for _, z := range zones {
			e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: z})
		}
		for _, n := range nodes {
			e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: n})
		}
	}
}

func ep(addr string, opts ...epOpt) discovery.Endpoint {
	e := discovery.Endpoint{Addresses: []string{addr}}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func slicePortOf(name string, port int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: ptr(name), Port: ptr(port), Protocol: ptr(v1.ProtocolTCP)}
}

// makeSlice returns an IPv4 slice for service svc with the given ports.
func makeSlice(ns, name, svc string, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, ResourceVersion: "1",
			Labels: map[string]string{discovery.LabelServiceName: svc},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func portName(ns, name, port string) ServicePortName {
	return ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: v1.ProtocolTCP}
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// wantEP is an expected endpoint: address:port plus the flags that matter.
func wantEP(addrPort string, readyV, servingV, terminatingV, local bool, node string) Endpoint {
	ap := netip.MustParseAddrPort(addrPort)
	return Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: readyV, Serving: servingV, Terminating: terminatingV,
		IsLocal: local, NodeName: node}
}

// vip returns the n-th test service VIP in 198.18.0.0/16.
func vip(n int) string { return fmt.Sprintf("198.18.%d.%d", n/250, n%250+1) }

// podIP returns the n-th test pod address in 198.19.0.0/16.
func podIP(n int) string { return fmt.Sprintf("198.19.%d.%d", n/250, n%250+1) }
