package portal

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// snapshotOf runs real Service objects through the service map.
func snapshotOf(t testing.TB, svcs ...*v1.Service) *servicemap.Snapshot {
	t.Helper()
	return catalogue.Scenario{Services: svcs}.Snapshot()
}

func service(ns, name string, mutate func(*v1.Service), ports ...v1.ServicePort) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:      v1.ServiceTypeClusterIP,
			ClusterIP: "198.18.0.10", ClusterIPs: []string{"198.18.0.10"},
			Ports: ports,
		},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

// nodePortWeb is default/web, a NodePort service with port http (80, node
// port 30080), changed further by mutate unless it is nil.
func nodePortWeb(mutate func(*v1.Service)) *v1.Service {
	return service("default", "web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		if mutate != nil {
			mutate(s)
		}
	}, catalogue.Port("http", v1.ProtocolTCP, 80, 30080))
}

func clusterIPs(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips }
}

// sequentialProxyPorts hands out proxy ports in name order: 40000, 40001 for
// the first port's internal and external class, and so on; shared gives one
// port for both classes.
func sequentialProxyPorts(snap *servicemap.Snapshot, shared bool) func(servicemap.ServicePortName) (ProxyPorts, bool) {
	m := map[servicemap.ServicePortName]ProxyPorts{}
	next := uint16(40000)
	for name := range snap.All() {
		if shared {
			m[name] = ProxyPorts{Internal: next, External: next}
			next++
			continue
		}
		m[name] = ProxyPorts{Internal: next, External: next + 1}
		next += 2
	}
	return func(n servicemap.ServicePortName) (ProxyPorts, bool) { pp, ok := m[n]; return pp, ok }
}

var testNode = Node{
	HostIPs:        []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("fd00::1")},
	LocalAddresses: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.1.1"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::1")},
}

// render is the golden text: both families' restore payloads and claims.
func render(t *testing.T, node Node, portals []Portal) string {
	t.Helper()
	var b strings.Builder
	for _, fam := range ipfamily.All() {
		rs, err := Build(fam, node, portals)
		if err != nil {
			t.Fatalf("Build(%s): %v", fam, err)
		}
		fmt.Fprintf(&b, "# %s restore payload\n%s", fam, Payload(rs, nil))
		fmt.Fprintf(&b, "# %s claims\n", fam)
		for _, c := range rs.Claims {
			fmt.Fprintf(&b, "%s\n", c)
		}
	}
	return b.String()
}

func TestBuildGolden(t *testing.T) {
	cases := []struct {
		name   string
		svcs   []*v1.Service
		node   Node
		shared bool
		// endpoints, when set, gives each portal its endpoint states.
		endpoints func(*servicemap.ServicePort) ClassEndpoints
	}{
		{
			name: "clusterip-tcp-udp",
			svcs: []*v1.Service{service("kube-system", "dns", nil,
				catalogue.Port("dns-tcp", v1.ProtocolTCP, 53, 0), catalogue.Port("dns", v1.ProtocolUDP, 53, 0))},
			node: testNode,
		},
		{
			name: "nodeport-all-addresses",
			svcs: []*v1.Service{nodePortWeb(nil)},
			node: testNode,
		},
		{
			// Redirected TCP and UDP pass only into kproxy's sockets;
			// SCTP, which the socket match cannot look up, keeps the
			// conntrack check.
			name: "socket-check",
			svcs: []*v1.Service{service("kube-system", "dns", nil,
				catalogue.Port("dns-tcp", v1.ProtocolTCP, 53, 0), catalogue.Port("dns", v1.ProtocolUDP, 53, 0),
				catalogue.Port("dns-sctp", v1.ProtocolSCTP, 53, 0))},
			node: func() Node {
				n := testNode
				n.CheckSocket = true
				return n
			}(),
		},
		{
			name: "nodeport-addresses",
			svcs: []*v1.Service{nodePortWeb(nil)},
			node: func() Node {
				n := testNode
				n.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("fd00::/64")}
				return n
			}(),
		},
		{
			name: "external-ips",
			svcs: []*v1.Service{service("default", "ext", func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"198.18.5.5", "198.19.1.1"}
			}, catalogue.Port("", v1.ProtocolTCP, 8443, 0))},
			node: testNode,
		},
		{
			name: "loadbalancer-source-ranges",
			svcs: []*v1.Service{
				service("default", "lb", func(s *v1.Service) {
					s.Spec.Type = v1.ServiceTypeLoadBalancer
					s.Spec.LoadBalancerSourceRanges = []string{"198.19.2.0/24", "203.0.113.7/32"}
					s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.18.9.9"}}
				}, catalogue.Port("https", v1.ProtocolTCP, 443, 30443)),
				service("default", "open-lb", func(s *v1.Service) {
					s.Spec.Type = v1.ServiceTypeLoadBalancer
					s.Spec.ClusterIP, s.Spec.ClusterIPs = "198.18.0.11", []string{"198.18.0.11"}
					s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.18.9.10"}}
				}, catalogue.Port("syslog", v1.ProtocolUDP, 514, 30514)),
			},
			node: testNode,
		},
		{
			name: "dual-stack",
			svcs: []*v1.Service{
				service("default", "dual", func(s *v1.Service) {
					clusterIPs("fd00:18::10", "198.18.0.20")(s)
					s.Spec.Type = v1.ServiceTypeLoadBalancer
					s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
					s.Spec.LoadBalancerSourceRanges = []string{"fd00:1::/64"}
					s.Spec.ExternalIPs = []string{"198.18.5.6", "fd00:18::5"}
					s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "fd00:18::99"}, {IP: "198.18.9.20"}}
				}, catalogue.Port("http", v1.ProtocolTCP, 80, 30081), catalogue.Port("dns", v1.ProtocolUDP, 53, 30053)),
				service("default", "v6only", clusterIPs("fd00:18::11"), catalogue.Port("", v1.ProtocolTCP, 80, 0)),
			},
			node: testNode,
		},
		{
			name: "multi-port-shared-proxy-port",
			svcs: []*v1.Service{service("shop", "api", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ExternalIPs = []string{"198.18.5.7"}
			}, catalogue.Port("http", v1.ProtocolTCP, 80, 30180), catalogue.Port("grpc", v1.ProtocolTCP, 9090, 30190), catalogue.Port("metrics", v1.ProtocolUDP, 9125, 0))},
			node:   testNode,
			shared: true,
		},
		{
			// Every destination of both classes, in both families, refused.
			name: "no-endpoints",
			svcs: []*v1.Service{
				service("default", "empty", func(s *v1.Service) {
					clusterIPs("198.18.0.30", "fd00:18::30")(s)
					s.Spec.Type = v1.ServiceTypeLoadBalancer
					s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
					s.Spec.LoadBalancerSourceRanges = []string{"198.19.2.0/24"}
					s.Spec.ExternalIPs = []string{"198.18.5.30", "198.19.1.1"}
					s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.18.9.30"}, {IP: "fd00:18::9:30"}}
				}, catalogue.Port("http", v1.ProtocolTCP, 80, 30080), catalogue.Port("dns", v1.ProtocolUDP, 53, 30053)),
				service("default", "served", clusterIPs("198.18.0.31"), catalogue.Port("", v1.ProtocolTCP, 80, 0)),
			},
			node: testNode,
			endpoints: func(sp *servicemap.ServicePort) ClassEndpoints {
				if sp.Name.Name == "served" {
					return ClassEndpoints{}
				}
				return ClassEndpoints{Internal: NoEndpoints, External: NoEndpoints}
			},
		},
		{
			// externalTrafficPolicy: Local without a local endpoint: the
			// external destinations are dropped, the cluster IP is served,
			// and the shared proxy port only drops what is external.
			name: "no-local-endpoints",
			svcs: []*v1.Service{service("default", "local", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.ExternalIPs = []string{"198.18.5.40"}
			}, catalogue.Port("http", v1.ProtocolTCP, 80, 30081))},
			node: func() Node {
				n := testNode
				n.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")}
				return n
			}(),
			shared:    true,
			endpoints: func(*servicemap.ServicePort) ClassEndpoints { return ClassEndpoints{External: NoLocalEndpoints} },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := snapshotOf(t, tc.svcs...)
			if snap.Len() == 0 {
				t.Fatal("the service map produced no service ports")
			}
			portals := PortalsFrom(snap, sequentialProxyPorts(snap, tc.shared))
			if tc.endpoints != nil {
				for i := range portals {
					portals[i].Endpoints = tc.endpoints(portals[i].Port)
				}
			}
			testkit.Golden(t, filepath.Join("testdata", tc.name+".golden"), render(t, tc.node, portals))
		})
	}
}

func TestBuildIsDeterministicAndOrderIndependent(t *testing.T) {
	snap := snapshotOf(t,
		service("b", "svc", nil, catalogue.Port("p", v1.ProtocolTCP, 80, 0)),
		service("a", "svc", clusterIPs("198.18.0.12"), catalogue.Port("p", v1.ProtocolUDP, 80, 0)),
	)
	portals := PortalsFrom(snap, sequentialProxyPorts(snap, false))
	first, err := Build(ipfamily.IPv4, testNode, portals)
	if err != nil {
		t.Fatal(err)
	}
	reversed := []Portal{portals[1], portals[0]}
	second, err := Build(ipfamily.IPv4, testNode, reversed)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := string(Payload(first, nil)), string(Payload(second, nil)); a != b {
		t.Errorf("input order changed the payload:\n%s\nvs\n%s", a, b)
	}
	if !strings.Contains(string(Payload(first, nil)), `-A KUBE-PORTALS-CONTAINER -d 198.18.0.12/32 -p udp -m comment --comment "a/svc:p" -m udp --dport 80 -j REDIRECT --to-ports 40000`) {
		t.Errorf("a/svc's portal missing or not first:\n%s", Payload(first, nil))
	}
}

func TestBuildReportsPortsItCannotProgram(t *testing.T) {
	snap := snapshotOf(t,
		service("default", "web", nil, catalogue.Port("http", v1.ProtocolTCP, 80, 0)),
		service("default", "v6", clusterIPs("fd00:18::1"), catalogue.Port("http", v1.ProtocolTCP, 80, 0)),
	)
	portals := PortalsFrom(snap, sequentialProxyPorts(snap, false))
	v4only := Node{HostIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1")}}
	rs, err := Build(ipfamily.IPv6, v4only, portals)
	if err == nil || !strings.Contains(err.Error(), "default/v6:http/TCP") || !strings.Contains(err.Error(), "no IPv6 node address") {
		t.Fatalf("Build without an IPv6 host IP: err = %v, want one naming default/v6:http/TCP", err)
	}
	if len(rs.NAT.Rules) != 0 {
		t.Errorf("IPv6 rules were written without a host IP: %v", rs.NAT.Rules)
	}
	rs, err = Build(ipfamily.IPv4, v4only, portals)
	if err != nil {
		t.Fatalf("IPv4 build: %v", err)
	}
	if len(rs.NAT.Rules) != 2 {
		t.Errorf("IPv4 build wrote %d nat rules, want the 2 of default/web: %v", len(rs.NAT.Rules), rs.NAT.Rules)
	}
}

func TestPortalsFromSkipsPortsWithoutProxyPorts(t *testing.T) {
	snap := snapshotOf(t, service("default", "sctp", nil, catalogue.Port("s", v1.ProtocolSCTP, 9, 0), catalogue.Port("t", v1.ProtocolTCP, 9, 0)))
	got := PortalsFrom(snap, func(n servicemap.ServicePortName) (ProxyPorts, bool) {
		return ProxyPorts{Internal: 41000, External: 41000}, n.Protocol != v1.ProtocolSCTP
	})
	if len(got) != 1 || got[0].Port.Name.Protocol != v1.ProtocolTCP {
		t.Fatalf("PortalsFrom = %v, want only the TCP port", got)
	}
}

func TestZeroProxyPortLeavesThatClassOut(t *testing.T) {
	snap := snapshotOf(t, service("default", "web", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort },
		catalogue.Port("http", v1.ProtocolTCP, 80, 30080)))
	portals := PortalsFrom(snap, func(servicemap.ServicePortName) (ProxyPorts, bool) {
		return ProxyPorts{Internal: 41000}, true
	})
	rs, err := Build(ipfamily.IPv4, testNode, portals)
	if err != nil {
		t.Fatal(err)
	}
	p := string(Payload(rs, nil))
	if strings.Contains(p, "--dport 30080") || len(rs.Claims) != 0 {
		t.Errorf("a NodePort was programmed without an external proxy port:\n%s", p)
	}
	if !strings.Contains(p, "-d 198.18.0.10/32") {
		t.Errorf("the cluster IP portal is missing:\n%s", p)
	}
}
