package userspace_test

// This test drives the whole userspace mode on the kernel, to check the glue
// that feeds the balancer's view of each class into the portals.

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/userspace"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

func clusterIPService(name, ip string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}, Ports: ports},
	}
}

func endpointSlice(svc string, proto v1.Protocol, port int32, ips ...string) *discovery.EndpointSlice {
	name := strings.ToLower(string(proto))
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-" + name,
			Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{ip}})
	}
	return s
}

// TestUserspaceModeRefusesWhileNoEndpoints follows one service through the
// userspace mode: refused at once (TCP reset, ICMP for UDP) while it has no
// endpoints, served once endpoints arrive, refused again when they leave.
func TestUserspaceModeRefusesWhileNoEndpoints(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	lab.AddNodeLink(t, "198.19.0.1/24")

	// The backend: a TCP server saying hello and a UDP echo on the node.
	tcpPort := int32(lab.ServeGreeting(t, "198.19.0.1:0", "hello").Port())
	udpPort := int32(lab.ServeUDPEcho(t, "198.19.0.1:0").Port())

	features := kernel.Detect(context.Background(), false)
	m, err := userspace.New(context.Background(), userspace.Config{
		Features: features, NodeName: "node-a", UDPIdleTimeout: 250 * time.Millisecond,
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(clusterIPService("svc", "198.18.0.40",
		v1.ServicePort{Name: "tcp", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(tcpPort)},
		v1.ServicePort{Name: "udp", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(udpPort)}))
	tr.OnSynced()
	sync := func() {
		t.Helper()
		snap, changes := tr.Snapshot()
		if err := m.Sync(context.Background(), snap, changes); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
	node := &net.Dialer{}
	tcp := func() (string, error) { return lab.TCPGreeting(node, "198.18.0.40:80") }
	udp := func() (string, error) { return lab.UDPAsk(node, "198.18.0.40:53", "ping") }
	wantRefused := func(when string) {
		t.Helper()
		if got, err := tcp(); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: TCP got %q, %v; want connection refused", when, got, err)
		}
		if got, err := udp(); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: UDP got %q, %v; want connection refused", when, got, err)
		}
		if save := lab.Run(t, features.Backend.SaveCommand(ipfamily.IPv4), "-t", "filter"); strings.Count(save, "has no endpoints") != 2 {
			t.Errorf("%s: want one refusal rule per protocol in\n%s", when, save)
		}
	}

	sync()
	wantRefused("before any endpoint")

	tr.OnEndpointSliceUpdate(endpointSlice("svc", v1.ProtocolTCP, tcpPort, "198.19.0.1"))
	tr.OnEndpointSliceUpdate(endpointSlice("svc", v1.ProtocolUDP, udpPort, "198.19.0.1"))
	sync()
	if got, err := tcp(); err != nil || got != "hello" {
		t.Errorf("with an endpoint: TCP got %q, %v; want hello", got, err)
	}
	if got, err := udp(); err != nil || got != "ping" {
		t.Errorf("with an endpoint: UDP got %q, %v; want the echo", got, err)
	}
	if save := lab.Run(t, features.Backend.SaveCommand(ipfamily.IPv4), "-t", "filter"); strings.Contains(save, "has no endpoints") {
		t.Errorf("refusal rules stayed after endpoints arrived:\n%s", save)
	}

	tr.OnEndpointSliceDelete(types.NamespacedName{Namespace: "default", Name: "svc-tcp"})
	tr.OnEndpointSliceDelete(types.NamespacedName{Namespace: "default", Name: "svc-udp"})
	sync()
	wantRefused("after the endpoints left")
}
