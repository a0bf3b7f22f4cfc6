package balancer

import (
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

const thisNode = "node-a"

func ptr[T any](v T) *T { return &v }

// svcOpt tweaks a test Service.
type svcOpt func(*v1.Service)

// service returns a ClusterIP service ns/name with one TCP port "http" 80
// whose endpoints listen on the slice port named "http".
func service(name string, opts ...svcOpt) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1"},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  "198.18.0.1",
			ClusterIPs: []string{"198.18.0.1"},
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

func dualStack(s *v1.Service) { s.Spec.ClusterIPs = []string{"198.18.0.1", "fd00::18:1"} }

func itpLocal(s *v1.Service) {
	s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
}

func etpLocalNodePort(s *v1.Service) {
	s.Spec.Type = v1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = 30080
	s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
}

// lbIngress makes the service a LoadBalancer with ingress IP ip.
func lbIngress(ip string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
	}
}

func affinity(seconds int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &seconds}}
	}
}

// epOpt tweaks one slice endpoint.
type epOpt func(*discovery.Endpoint)

func notReady(e *discovery.Endpoint) { e.Conditions.Ready = ptr(false) }

// servingTerm marks an endpoint as a pod shutting down that still serves.
func servingTerm(e *discovery.Endpoint) {
	e.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
}

func terminatingNotServing(e *discovery.Endpoint) {
	e.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
}

func onNode(n string) epOpt { return func(e *discovery.Endpoint) { e.NodeName = ptr(n) } }

func zoneHints(zones ...string) epOpt {
	return func(e *discovery.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discovery.EndpointHints{}
		}
		for _, z := range zones {
			e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: z})
		}
	}
}

func nodeHints(nodes ...string) epOpt {
	return func(e *discovery.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discovery.EndpointHints{}
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

// slice returns an EndpointSlice named sliceName of service svc whose port
// "http" is 8080, with the address type taken from the first endpoint.
func slice(svc, sliceName string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	at := discovery.AddressTypeIPv4
	if len(eps) > 0 && netip.MustParseAddr(eps[0].Addresses[0]).Is6() {
		at = discovery.AddressTypeIPv6
	}
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: sliceName, ResourceVersion: "1",
			Labels: map[string]string{discovery.LabelServiceName: svc},
		},
		AddressType: at,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(v1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

func httpPort(svc string) servicemap.ServicePortName {
	return servicemap.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: "ns", Name: svc}, Port: "http", Protocol: v1.ProtocolTCP,
	}
}

func key(svc string, c Class, f ipfamily.Family) Key {
	return Key{Port: httpPort(svc), Class: c, Family: f}
}

func aps(ss ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddrPort(s)
	}
	return out
}

// world is a real servicemap.Tracker fed k8s objects, with a Balancer fed
// its snapshots.
type world struct {
	t     testing.TB
	tr    *servicemap.Tracker
	clock *clocktesting.FakeClock
	b     *Balancer
}

func newWorld(t testing.TB, cfg Config) *world {
	t.Helper()
	w := &world{t: t, tr: servicemap.NewTracker(thisNode, nil), clock: clocktesting.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))}
	if cfg.Clock == nil {
		cfg.Clock = w.clock
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	w.b = b
	return w
}

// sync hands the tracker's next snapshot to the balancer and returns it.
func (w *world) sync() *servicemap.Snapshot {
	snap, _ := w.tr.Snapshot()
	w.b.Update(snap)
	return snap
}

func (w *world) apply(svcs []*v1.Service, slices []*discovery.EndpointSlice) {
	for _, s := range svcs {
		w.tr.OnServiceUpdate(s)
	}
	for _, s := range slices {
		w.tr.OnEndpointSliceUpdate(s)
	}
	w.sync()
}

func (w *world) setZone(zone string) {
	w.tr.OnNodeUpdate(&v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: thisNode, Labels: map[string]string{v1.LabelTopologyZone: zone},
	}})
}
