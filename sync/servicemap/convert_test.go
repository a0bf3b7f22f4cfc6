package servicemap

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/klog/v2"
)

func TestServicePortsOfSkipRules(t *testing.T) {
	tests := []struct {
		name string
		svc  *v1.Service
		skip bool
		// badIP marks a service kube-proxy would try (it has a cluster IP)
		// but whose IP does not parse: no reason, yet no ports.
		badIP bool
	}{
		{"plain ClusterIP service", makeService("ns", "s", "198.18.0.1"), false, false},
		{"clusterIP None", makeService("ns", "s", v1.ClusterIPNone), true, false},
		{"clusterIP empty", makeService("ns", "s", ""), true, false},
		{"ExternalName", makeService("ns", "s", "198.18.0.1", withType(v1.ServiceTypeExternalName)), true, false},
		{"service-proxy-name label", makeService("ns", "s", "198.18.0.1", withLabels(LabelServiceProxyName, "other")), true, false},
		{"empty service-proxy-name label", makeService("ns", "s", "198.18.0.1", withLabels(LabelServiceProxyName, "")), true, false},
		{"headless label", makeService("ns", "s", "198.18.0.1", withLabels(v1.IsHeadlessService, "")), true, false},
		{"unrelated label", makeService("ns", "s", "198.18.0.1", withLabels("app", "x")), false, false},
		{"unparseable cluster IP", makeService("ns", "s", "not-an-ip"), true, true},
		{"nil", nil, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ServicePortsOf(tt.svc)
			if tt.skip && got != nil {
				t.Fatalf("expected the service to be skipped, got %d ports", len(got))
			}
			if !tt.skip && len(got) != 1 {
				t.Fatalf("expected one port, got %d", len(got))
			}
			if reason := SkipServiceReason(tt.svc); (reason != "") != (tt.skip && !tt.badIP) {
				t.Errorf("SkipServiceReason = %q, want skip=%v", reason, tt.skip)
			}
		})
	}
}

func TestServicePortsOfFields(t *testing.T) {
	local, cluster := v1.ServiceExternalTrafficPolicyLocal, v1.ServiceExternalTrafficPolicyCluster
	base := ServicePort{Name: portName("ns", "s", "http"), ClusterIPs: addrs("198.18.0.1"), Port: 80}
	tests := []struct {
		name   string
		mutate func(*v1.Service)
		want   func(p *ServicePort)
	}{
		{"defaults", func(*v1.Service) {}, func(*ServicePort) {}},
		{"dual-stack cluster IPs keep order", func(s *v1.Service) {
			s.Spec.ClusterIPs = []string{"198.18.0.1", "fd00::18:1"}
		}, func(p *ServicePort) { p.ClusterIPs = addrs("198.18.0.1", "fd00::18:1") }},
		{"IPv6 primary", func(s *v1.Service) {
			s.Spec.ClusterIP = "fd00::18:1"
			s.Spec.ClusterIPs = []string{"fd00::18:1", "198.18.0.1"}
		}, func(p *ServicePort) { p.ClusterIPs = addrs("fd00::18:1", "198.18.0.1") }},
		{"falls back to clusterIP", func(s *v1.Service) { s.Spec.ClusterIPs = nil },
			func(*ServicePort) {}},
		{"sloppy leading zeros", func(s *v1.Service) { s.Spec.ClusterIPs = []string{"198.018.000.001"} },
			func(*ServicePort) {}},
		{"external IPs, bad ones skipped", func(s *v1.Service) {
			s.Spec.ExternalIPs = []string{"198.19.1.1", "bogus", "fd00::19:1"}
		}, func(p *ServicePort) { p.ExternalIPs = addrs("198.19.1.1", "fd00::19:1") }},
		{"LB ingress: VIP and unset kept, Proxy and hostname skipped", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{
				{IP: "198.19.2.1"},
				{IP: "198.19.2.2", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
				{IP: "198.19.2.3", IPMode: ptr(v1.LoadBalancerIPModeProxy)},
				{Hostname: "lb.example"},
			}
		}, func(p *ServicePort) { p.NodePort = 30080; p.LoadBalancerIPs = addrs("198.19.2.1", "198.19.2.2") }},
		{"source ranges trimmed, masked, bad skipped", func(s *v1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{" 198.19.0.0/16 ", "198.19.3.7/24", "nonsense", "fd00::/64\n"}
		}, func(p *ServicePort) {
			p.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16"),
				netip.MustParsePrefix("198.19.3.0/24"), netip.MustParsePrefix("fd00::/64")}
		}},
		{"ClientIP affinity with nil config gets the default", func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		}, func(p *ServicePort) { p.AffinityTimeout = DefaultAffinityTimeout }},
		{"ClientIP affinity with explicit timeout", func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
		}, func(p *ServicePort) { p.AffinityTimeout = time.Minute }},
		{"affinity None ignores config", func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityNone
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
		}, func(*ServicePort) {}},
		{"internal policy Local", func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
		}, func(p *ServicePort) { p.InternalPolicyLocal = true }},
		{"external Local on plain ClusterIP does not count", func(s *v1.Service) {
			s.Spec.ExternalTrafficPolicy = local
		}, func(*ServicePort) {}},
		{"external Local with external IPs counts", func(s *v1.Service) {
			s.Spec.ExternalTrafficPolicy = local
			s.Spec.ExternalIPs = []string{"198.19.1.1"}
		}, func(p *ServicePort) { p.ExternalPolicyLocal = true; p.ExternalIPs = addrs("198.19.1.1") }},
		{"NodePort Local: no health check port", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.ExternalTrafficPolicy = local
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.HealthCheckNodePort = 31000
		}, func(p *ServicePort) { p.ExternalPolicyLocal = true; p.NodePort = 30080 }},
		{"LoadBalancer Local: health check port", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = local
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.HealthCheckNodePort = 31000
		}, func(p *ServicePort) { p.ExternalPolicyLocal = true; p.NodePort = 30080; p.HealthCheckNodePort = 31000 }},
		{"LoadBalancer Cluster: no health check port", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = cluster
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.HealthCheckNodePort = 31000
		}, func(p *ServicePort) { p.NodePort = 30080 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := makeService("ns", "s", "198.18.0.1")
			tt.mutate(svc)
			want := base
			tt.want(&want)
			got := ServicePortsOf(svc)
			if len(got) != 1 {
				t.Fatalf("got %d ports, want 1", len(got))
			}
			if diff := cmp.Diff(&want, got[0], cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("ServicePortsOf mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServicePortsOfPorts(t *testing.T) {
	svc := makeService("ns", "s", "198.18.0.1", withPorts(
		v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53},
		v1.ServicePort{Name: "dns", Protocol: v1.ProtocolTCP, Port: 53},
		v1.ServicePort{Name: "dns", Protocol: v1.ProtocolTCP, Port: 54}, // duplicate name+protocol: dropped
		v1.ServicePort{Name: "bad", Protocol: v1.ProtocolTCP, Port: 70000},
		v1.ServicePort{Name: "noproto", Port: 8080},
	))
	var got []string
	for _, p := range ServicePortsOf(svc) {
		got = append(got, p.Name.String()+"="+netip.AddrPortFrom(p.ClusterIPs[0], p.Port).String())
	}
	want := []string{"ns/s:dns/UDP=198.18.0.1:53", "ns/s:dns/TCP=198.18.0.1:53", "ns/s:noproto/TCP=198.18.0.1:8080"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
}

// TestIPv4MappedAddressesAreNeverReadSilently: the API server refuses
// IPv4-mapped IPv6 addresses now, but an older one accepted them as IPv4
// (and kube-proxy reads them so). The map reads them as IPv4 too, and logs a
// warning naming the object and the field for each.
func TestIPv4MappedAddressesAreNeverReadSilently(t *testing.T) {
	lb := func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeLoadBalancer; s.Spec.Ports[0].NodePort = 30080 }
	tests := []struct {
		name   string
		mutate func(*v1.Service)
		slice  *discovery.EndpointSlice
		// read is the field as the map holds it.
		read func(*ServicePort, []Endpoint) any
		want string
		// field is what the warning names.
		field string
	}{
		{name: "clusterIP", mutate: func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "::ffff:198.18.200.60", nil
		}, read: func(p *ServicePort, _ []Endpoint) any { return p.ClusterIPs },
			want: "[198.18.200.60]", field: "spec.clusterIP"},
		{name: "second of clusterIPs", mutate: func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00:18::1", []string{"fd00:18::1", "::ffff:198.18.200.60"}
		}, read: func(p *ServicePort, _ []Endpoint) any { return p.ClusterIPs },
			want: "[fd00:18::1 198.18.200.60]", field: "spec.clusterIPs[1]"},
		{name: "externalIPs", mutate: func(s *v1.Service) {
			s.Spec.ExternalIPs = []string{"198.19.1.1", "::ffff:198.19.1.2"}
		}, read: func(p *ServicePort, _ []Endpoint) any { return p.ExternalIPs },
			want: "[198.19.1.1 198.19.1.2]", field: "spec.externalIPs[1]"},
		{name: "ingress IP", mutate: func(s *v1.Service) {
			lb(s)
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "::ffff:198.19.2.1"}}
		}, read: func(p *ServicePort, _ []Endpoint) any { return p.LoadBalancerIPs },
			want: "[198.19.2.1]", field: "status.loadBalancer.ingress[0].ip"},
		{name: "loadBalancerSourceRanges", mutate: func(s *v1.Service) {
			lb(s)
			s.Spec.LoadBalancerSourceRanges = []string{"::ffff:198.19.0.0/120"}
		}, read: func(p *ServicePort, _ []Endpoint) any { return p.LoadBalancerSourceRanges },
			want: "[198.19.0.0/24]", field: "spec.loadBalancerSourceRanges[0]"},
		{name: "endpoint address",
			slice: makeSlice("ns", "s-1", "s", []discovery.EndpointPort{slicePortOf("http", 8080)}, ep("198.19.3.1"), ep("::ffff:198.19.3.2")),
			read: func(_ *ServicePort, eps []Endpoint) any {
				var out []netip.Addr
				for _, e := range eps {
					out = append(out, e.Addr)
				}
				return out
			},
			want: "[198.19.3.1 198.19.3.2]", field: "endpoints[1].addresses[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logged []string
			klog.SetLogger(funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
			defer klog.ClearLogger()

			svc := makeService("ns", "s", "198.18.0.1")
			if tt.mutate != nil {
				tt.mutate(svc)
			}
			ports := ServicePortsOf(svc)
			if len(ports) != 1 {
				t.Fatalf("got %d service ports, want 1", len(ports))
			}
			var eps []Endpoint
			if tt.slice != nil {
				eps = parseSlice(tt.slice, "node").ports[0].endpoints
			}
			if got := fmt.Sprint(tt.read(ports[0], eps)); got != tt.want {
				t.Errorf("read %q, want %q (as IPv4, as kube-proxy reads it)", got, tt.want)
			}
			var warned bool
			for _, l := range logged {
				warned = warned || (strings.Contains(l, "IPv4-mapped") && strings.Contains(l, `"field"="`+tt.field+`"`))
			}
			if !warned {
				t.Errorf("no warning naming %s; logged:\n%s", tt.field, strings.Join(logged, "\n"))
			}
		})
	}
}
