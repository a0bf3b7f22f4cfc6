package filesource

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const validService = `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 198.18.0.10
  ports:
  - port: 80
`

// TestDecodeRejectsWhatTheAPIServerRejects covers addresses no service may
// use and node ports the API server would not allocate: each is rejected with a message naming the field.
func TestDecodeRejectsWhatTheAPIServerRejects(t *testing.T) {
	const obj = "f.yaml: document 1 at line 1 (Service default/web): "
	const sliceObj = "f.yaml: document 1 at line 1 (EndpointSlice default/web-1): "
	svc := func(spec string) string {
		return "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {" + spec + "}\n"
	}
	slice := func(family, addr string) string {
		return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, labels: {kubernetes.io/service-name: web}}\n" +
			"addressType: " + family + "\nendpoints: [{addresses: [\"" + addr + "\"]}]\n"
	}
	nodePortSvc := func(ports string) string {
		return svc("type: NodePort, clusterIP: 198.18.0.10, ports: [" + ports + "]")
	}
	cases := []struct {
		name, data, want string
	}{
		{"loopback endpoint", slice("IPv4", "127.0.0.1"), sliceObj + `endpoints[0].addresses[0]: "127.0.0.1" may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{"loopback endpoint anywhere in 127/8", slice("IPv4", "127.1.2.3"), sliceObj + `endpoints[0].addresses[0]: "127.1.2.3" may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{"IPv6 loopback endpoint", slice("IPv6", "::1"), sliceObj + `endpoints[0].addresses[0]: "::1" may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{"unspecified endpoint", slice("IPv4", "0.0.0.0"), sliceObj + `endpoints[0].addresses[0]: "0.0.0.0" may not be unspecified (0.0.0.0, ::)`},
		{"link-local endpoint", slice("IPv4", "169.254.169.254"), sliceObj + `endpoints[0].addresses[0]: "169.254.169.254" may not be in the link-local range (169.254.0.0/16, fe80::/10)`},
		{"IPv6 link-local endpoint", slice("IPv6", "fe80::1"), sliceObj + `endpoints[0].addresses[0]: "fe80::1" may not be in the link-local range (169.254.0.0/16, fe80::/10)`},
		{"multicast endpoint", slice("IPv4", "239.1.1.1"), sliceObj + `endpoints[0].addresses[0]: "239.1.1.1" may not be a multicast address (224.0.0.0/4, ff00::/8)`},
		{"IPv6 multicast endpoint", slice("IPv6", "ff02::1"), sliceObj + `endpoints[0].addresses[0]: "ff02::1" may not be a multicast address (224.0.0.0/4, ff00::/8)`},
		{"loopback cluster IP", svc("clusterIP: 127.0.0.1, ports: [{port: 10249}]"), obj + `spec.clusterIP: "127.0.0.1" may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{"unspecified cluster IP", svc("clusterIP: 0.0.0.0, ports: [{port: 80}]"), obj + `spec.clusterIP: "0.0.0.0" may not be unspecified (0.0.0.0, ::)`},
		{"second cluster IP loopback", svc("clusterIP: 198.18.0.10, clusterIPs: [198.18.0.10, \"::1\"], ipFamilyPolicy: RequireDualStack, ports: [{port: 80}]"),
			obj + `spec.clusterIPs[1]: "::1" may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{"IPv4-mapped loopback cluster IP", svc("clusterIP: \"::ffff:127.0.0.1\", ports: [{port: 80}]"), obj + `spec.clusterIP: "::ffff:127.0.0.1" must not be an IPv4-mapped IPv6 address (write 127.0.0.1)`},
		// IPv4-mapped IPv6 addresses, refused in every address field as the
		// API server refuses them (kproxy would program the IPv4 address).
		{"IPv4-mapped cluster IP", svc("clusterIP: \"::ffff:198.18.200.60\", ports: [{port: 80}]"),
			obj + `spec.clusterIP: "::ffff:198.18.200.60" must not be an IPv4-mapped IPv6 address (write 198.18.200.60)`},
		{"IPv4-mapped second cluster IP", svc("clusterIP: \"fd00:18::10\", clusterIPs: [\"fd00:18::10\", \"::ffff:198.18.200.60\"], ipFamilyPolicy: RequireDualStack, ports: [{port: 80}]"),
			obj + `spec.clusterIPs[1]: "::ffff:198.18.200.60" must not be an IPv4-mapped IPv6 address (write 198.18.200.60)`},
		{"IPv4-mapped external IP", svc("clusterIP: 198.18.0.10, externalIPs: [198.18.5.10, \"::ffff:198.18.5.11\"], ports: [{port: 80}]"),
			obj + `spec.externalIPs[1]: "::ffff:198.18.5.11" must not be an IPv4-mapped IPv6 address (write 198.18.5.11)`},
		{"IPv4-mapped loadBalancerIP", svc("clusterIP: 198.18.0.10, type: LoadBalancer, loadBalancerIP: \"::ffff:198.18.5.12\", ports: [{port: 80, nodePort: 30080}]"),
			obj + `spec.loadBalancerIP: "::ffff:198.18.5.12" must not be an IPv4-mapped IPv6 address (write 198.18.5.12)`},
		{"IPv4-mapped ingress IP", svc("clusterIP: 198.18.0.10, type: LoadBalancer, ports: [{port: 80, nodePort: 30080}]") + "status: {loadBalancer: {ingress: [{ip: \"::ffff:198.18.5.13\"}]}}\n",
			obj + `status.loadBalancer.ingress[0].ip: "::ffff:198.18.5.13" must not be an IPv4-mapped IPv6 address (write 198.18.5.13)`},
		{"IPv4-mapped endpoint of an IPv4 slice", slice("IPv4", "::ffff:198.19.1.1"),
			sliceObj + `endpoints[0].addresses[0]: "::ffff:198.19.1.1" must not be an IPv4-mapped IPv6 address (write 198.19.1.1)`},
		{"IPv4-mapped endpoint of an IPv6 slice", slice("IPv6", "::ffff:198.19.1.1"),
			sliceObj + `endpoints[0].addresses[0]: "::ffff:198.19.1.1" must not be an IPv4-mapped IPv6 address (write 198.19.1.1)`},
		{"IPv4-mapped source range", svc("clusterIP: 198.18.0.10, type: LoadBalancer, loadBalancerSourceRanges: [198.19.0.0/24, \"::ffff:198.19.0.0/120\"], ports: [{port: 80, nodePort: 30080}]"),
			obj + `spec.loadBalancerSourceRanges[1]: "::ffff:198.19.0.0/120" must not have an IPv4-mapped IPv6 address`},
		{"source range with host bits", svc("clusterIP: 198.18.0.10, type: LoadBalancer, loadBalancerSourceRanges: [198.19.0.2/24], ports: [{port: 80, nodePort: 30080}]"),
			obj + `spec.loadBalancerSourceRanges[0]: "198.19.0.2/24" must not have bits set beyond the prefix length (write 198.19.0.0/24)`},
		{"multicast cluster IP", svc("clusterIP: 224.0.0.1, ports: [{port: 80}]"), obj + `spec.clusterIP: "224.0.0.1" may not be a multicast address (224.0.0.0/4, ff00::/8)`},
		{"loopback external IP", svc("clusterIP: 198.18.0.10, externalIPs: [127.0.0.1], ports: [{port: 80}]"), obj + `spec.externalIPs[0]: "127.0.0.1" may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{"link-local ingress IP", svc("clusterIP: 198.18.0.10, type: LoadBalancer, ports: [{port: 80, nodePort: 30080}]") + "status: {loadBalancer: {ingress: [{ip: 169.254.0.1}]}}\n",
			obj + `status.loadBalancer.ingress[0].ip: "169.254.0.1" may not be in the link-local range (169.254.0.0/16, fe80::/10)`},
		{"node port 22", nodePortSvc("{port: 80, nodePort: 22}"), obj + "spec.ports[0].nodePort: 22 is not in the node port range 30000-32767 (the API server's default; kproxy has no setting for it)"},
		{"node port just above the range", nodePortSvc("{port: 80, nodePort: 32768}"), obj + "spec.ports[0].nodePort: 32768 is not in the node port range 30000-32767 (the API server's default; kproxy has no setting for it)"},
		{"node port twice with one protocol", nodePortSvc("{name: a, port: 80, nodePort: 30080}, {name: b, port: 81, nodePort: 30080}"),
			obj + "spec.ports[1].nodePort: 30080/TCP is already used by spec.ports[0].nodePort"},
		{"health check node port out of range", svc("type: LoadBalancer, externalTrafficPolicy: Local, healthCheckNodePort: 10256, clusterIP: 198.18.0.10, ports: [{port: 80, nodePort: 30080}]"),
			obj + "spec.healthCheckNodePort: 10256 is not in the node port range 30000-32767 (the API server's default; kproxy has no setting for it)"},
		{"health check node port on a service port", svc("type: LoadBalancer, externalTrafficPolicy: Local, healthCheckNodePort: 30080, clusterIP: 198.18.0.10, ports: [{port: 80, nodePort: 30080}]"),
			obj + "spec.healthCheckNodePort: 30080 is already used by spec.ports[0].nodePort"},
	}
	dec := newDecoder()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range dec.decodeFile("f.yaml", []byte(tc.data), false) {
				if d.err != nil {
					got = append(got, d.err.Error())
				}
			}
			if diff := cmp.Diff([]string{tc.want}, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}

	// What stays allowed: the bounds of the range, one node port for TCP
	// and UDP, global unicast addresses of both families.
	for _, data := range []string{
		nodePortSvc("{name: a, port: 80, nodePort: 30000}, {name: b, port: 81, nodePort: 32767}"),
		nodePortSvc("{name: a, port: 53, nodePort: 30053}, {name: b, port: 53, protocol: UDP, nodePort: 30053}"),
		slice("IPv4", "198.19.1.1"), slice("IPv6", "fd00::1"),
	} {
		for _, d := range dec.decodeFile("f.yaml", []byte(data), false) {
			if d.err != nil {
				t.Errorf("rejected %q: %v", data, d.err)
			}
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := []struct {
		name   string
		file   string
		data   string
		want   string // the complete error message
		prefix bool   // want is only the start (third-party wording follows)
	}{{
		name:   "bad YAML",
		data:   "apiVersion: v1\nkind: Service\nmetadata: {name: web\n",
		want:   "f.yaml: document 1 at line 1: invalid YAML: ",
		prefix: true,
	}, {
		name:   "bad JSON",
		file:   "f.json",
		data:   `{"apiVersion": "v1", "kind": "Service",`,
		want:   "f.json: document 1 at line 1: invalid JSON: ",
		prefix: true,
	}, {
		name: "not an object",
		data: "- just\n- a list\n",
		want: "f.yaml: document 1 at line 1: a document must be a Kubernetes object: a mapping with apiVersion, kind and metadata",
	}, {
		name: "unknown kind",
		data: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n  namespace: shop\n",
		want: "f.yaml: document 1 at line 1 (Deployment shop/app): kind Deployment is not supported; a services file holds Service, EndpointSlice and Node objects",
	}, {
		name: "v1 Endpoints",
		data: "apiVersion: v1\nkind: Endpoints\nmetadata:\n  name: web\n",
		want: "f.yaml: document 1 at line 1 (Endpoints default/web): kind Endpoints is not supported; a services file holds Service, EndpointSlice and Node objects (describe endpoints with discovery.k8s.io/v1 EndpointSlices)",
	}, {
		name: "missing apiVersion",
		data: "kind: Service\nmetadata:\n  name: web\n",
		want: "f.yaml: document 1 at line 1 (Service default/web): apiVersion is required",
	}, {
		name: "missing kind",
		data: "apiVersion: v1\nmetadata:\n  name: web\n",
		want: "f.yaml: document 1 at line 1: kind is required",
	}, {
		name: "old EndpointSlice version",
		data: "apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n",
		want: "f.yaml: document 1 at line 1 (EndpointSlice default/web-1): apiVersion discovery.k8s.io/v1beta1 is not supported for EndpointSlice; use discovery.k8s.io/v1",
	}, {
		name: "unknown field",
		data: validService + "  sessionAfinity: ClientIP\n",
		want: `f.yaml: document 1 at line 1 (Service default/web): unknown field "spec.sessionAfinity"`,
	}, {
		name: "duplicate field",
		data: "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  name: web2\nspec:\n  clusterIP: 198.18.0.10\n  ports:\n  - port: 80\n",
		want: `f.yaml: document 1 at line 1 (Service default/web2): line 5: key "name" already set in map`,
	}, {
		name: "invalid cluster IP",
		data: strings.Replace(validService, "198.18.0.10", "198.18.0.300", 1),
		want: `f.yaml: document 1 at line 1 (Service default/web): spec.clusterIP: "198.18.0.300" is not a valid IP address`,
	}, {
		name: "missing cluster IP",
		data: strings.Replace(validService, "  clusterIP: 198.18.0.10\n", "", 1),
		want: "f.yaml: document 1 at line 1 (Service default/web): spec.clusterIP: spec.clusterIP is required in a services file: there is no API server to allocate one; use None for headless",
	}, {
		name: "invalid external IP",
		data: validService + "  externalIPs: [198.19.0.1, not-an-ip]\n",
		want: `f.yaml: document 1 at line 1 (Service default/web): spec.externalIPs[1]: "not-an-ip" is not a valid IP address`,
	}, {
		name: "port 0",
		data: strings.Replace(validService, "port: 80", "port: 0", 1),
		want: "f.yaml: document 1 at line 1 (Service default/web): spec.ports[0].port: 0 is not a valid port (1-65535)",
	}, {
		name: "port 70000 in the third document",
		data: validService + "---\n# a comment\n" + strings.Replace(validService, "name: web", "name: web2", 1) +
			"---\n" + strings.Replace(validService, "port: 80", "port: 70000", 1),
		want: "f.yaml: document 3 at line 20 (Service default/web): spec.ports[0].port: 70000 is not a valid port (1-65535)",
	}, {
		name: "node port out of range",
		data: strings.Replace(validService, "  ports:\n  - port: 80\n", "  type: NodePort\n  ports:\n  - port: 80\n    nodePort: 65536\n", 1),
		want: "f.yaml: document 1 at line 1 (Service default/web): spec.ports[0].nodePort: 65536 is not in the node port range 30000-32767 (the API server's default; kproxy has no setting for it)",
	}, {
		name: "bad protocol",
		data: validService + "    protocol: ICMP\n",
		want: `f.yaml: document 1 at line 1 (Service default/web): spec.ports[0].protocol: "ICMP" is not a valid protocol (TCP, UDP or SCTP)`,
	}, {
		name: "two unnamed ports",
		data: validService + "  - port: 443\n",
		want: "f.yaml: document 1 at line 1 (Service default/web): spec.ports[0].name: is required when a service has more than one port; spec.ports[1].name: is required when a service has more than one port",
	}, {
		name: "port name reused with the same protocol",
		data: strings.Replace(validService, "  - port: 80\n", "  - {name: a, port: 80}\n  - {name: a, port: 81}\n", 1),
		want: `f.yaml: document 1 at line 1 (Service default/web): spec.ports[1].name: "a" is already used by spec.ports[0] with protocol TCP`,
	}, {
		name: "bad source range",
		data: validService + "  loadBalancerSourceRanges: [10.0.0.0/33]\n",
		want: `f.yaml: document 1 at line 1 (Service default/web): spec.loadBalancerSourceRanges[0]: "10.0.0.0/33" is not a valid CIDR`,
	}, {
		name: "affinity timeout too long",
		data: validService + "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 86401}}\n",
		want: "f.yaml: document 1 at line 1 (Service default/web): spec.sessionAffinityConfig.clientIP.timeoutSeconds: 86401 is not valid (1-86400)",
	}, {
		name: "bad ingress IP",
		data: validService + "status:\n  loadBalancer:\n    ingress: [{ip: 198.18.1}]\n",
		want: `f.yaml: document 1 at line 1 (Service default/web): status.loadBalancer.ingress[0].ip: "198.18.1" is not a valid IP address`,
	}, {
		name: "slice without service-name label",
		data: "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: foo-abc\naddressType: IPv4\nendpoints:\n- addresses: [198.19.1.1]\n",
		want: "f.yaml: document 1 at line 1 (EndpointSlice default/foo-abc): metadata.labels: EndpointSlice default/foo-abc has no kubernetes.io/service-name label; kproxy cannot tell which Service it belongs to",
	}, {
		name: "slice address of the wrong family",
		data: "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: foo-abc\n  labels: {kubernetes.io/service-name: foo}\naddressType: IPv4\nendpoints:\n- addresses: [\"fd00::1\"]\n",
		want: `f.yaml: document 1 at line 1 (EndpointSlice default/foo-abc): endpoints[0].addresses[0]: "fd00::1" is not an IPv4 address (addressType is IPv4)`,
	}, {
		name: "slice port 70000",
		data: "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: foo-abc\n  labels: {kubernetes.io/service-name: foo}\naddressType: IPv4\nports: [{port: 70000}]\n",
		want: "f.yaml: document 1 at line 1 (EndpointSlice default/foo-abc): ports[0].port: 70000 is not a valid port (1-65535)",
	}, {
		name: "slice address type",
		data: "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: foo-abc\n  labels: {kubernetes.io/service-name: foo}\naddressType: IPv5\n",
		want: `f.yaml: document 1 at line 1 (EndpointSlice default/foo-abc): addressType: "IPv5" is not valid (IPv4, IPv6 or FQDN)`,
	}, {
		name: "list item",
		file: "f.json",
		data: `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ok"}, "spec": {"clusterIP": "198.18.0.1", "ports": [{"port": 80}]}},
  {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad"}, "spec": {"clusterIP": "198.18.0.2", "ports": [{"port": 70000}]}}]}`,
		want: "f.json: document 1 item 2 (Service default/bad): spec.ports[0].port: 70000 is not a valid port (1-65535)",
	}}
	dec := newDecoder()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "f.yaml"
			}
			docs := dec.decodeFile(file, []byte(tc.data), strings.HasSuffix(file, ".json"))
			var got []string
			for _, d := range docs {
				if d.err != nil {
					got = append(got, d.err.Error())
				}
			}
			if len(got) != 1 {
				t.Fatalf("got %d errors %q, want exactly one", len(got), got)
			}
			if tc.prefix && !strings.HasPrefix(got[0], tc.want) || !tc.prefix && got[0] != tc.want {
				t.Errorf("error:\n got %s\nwant %s", got[0], tc.want)
			}
		})
	}
}

func TestDecodeDefaults(t *testing.T) {
	tcp, udp := v1.ProtocolTCP, v1.ProtocolUDP
	cluster := v1.ServiceInternalTrafficPolicyCluster
	single, dual := v1.IPFamilyPolicySingleStack, v1.IPFamilyPolicyRequireDualStack
	vip := v1.LoadBalancerIPModeVIP
	yes := true
	timeout := int32(10800)
	emptyName, http := "", "http"
	port := int32(8080)

	cases := []struct {
		name string
		data string
		want any
	}{{
		name: "ClusterIP service",
		data: validService,
		want: v1.ServiceSpec{
			Type:                  v1.ServiceTypeClusterIP,
			ClusterIP:             "198.18.0.10",
			ClusterIPs:            []string{"198.18.0.10"},
			IPFamilies:            []v1.IPFamily{v1.IPv4Protocol},
			IPFamilyPolicy:        &single,
			Ports:                 []v1.ServicePort{{Protocol: tcp, Port: 80, TargetPort: intstr.FromInt32(80)}},
			SessionAffinity:       v1.ServiceAffinityNone,
			InternalTrafficPolicy: &cluster,
		},
	}, {
		name: "dual-stack LoadBalancer with affinity",
		data: `apiVersion: v1
kind: Service
metadata: {name: lb, namespace: shop}
spec:
  type: LoadBalancer
  clusterIPs: ["fd00::10", 198.18.0.10]
  sessionAffinity: ClientIP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: dns}
  - {name: dns, port: 53}
status:
  loadBalancer:
    ingress: [{ip: 198.18.100.1}]
`,
		want: v1.Service{
			Spec: v1.ServiceSpec{
				Type:           v1.ServiceTypeLoadBalancer,
				ClusterIP:      "fd00::10",
				ClusterIPs:     []string{"fd00::10", "198.18.0.10"},
				IPFamilies:     []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol},
				IPFamilyPolicy: &dual,
				Ports: []v1.ServicePort{
					{Name: "dns", Protocol: udp, Port: 53, TargetPort: intstr.FromString("dns")},
					{Name: "dns", Protocol: tcp, Port: 53, TargetPort: intstr.FromInt32(53)},
				},
				SessionAffinity:               v1.ServiceAffinityClientIP,
				SessionAffinityConfig:         &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}},
				ExternalTrafficPolicy:         v1.ServiceExternalTrafficPolicyCluster,
				InternalTrafficPolicy:         &cluster,
				AllocateLoadBalancerNodePorts: &yes,
			},
			Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{
				Ingress: []v1.LoadBalancerIngress{{IP: "198.18.100.1", IPMode: &vip}},
			}},
		},
	}, {
		name: "EndpointSlice ports",
		data: `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{port: 8080}, {name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [198.19.1.1]}]
`,
		want: []discovery.EndpointPort{{Name: &emptyName, Port: &port, Protocol: &tcp}, {Name: &http, Port: &port, Protocol: &tcp}},
	}}
	dec := newDecoder()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs := dec.decodeFile("f.yaml", []byte(tc.data), false)
			if len(docs) != 1 || docs[0].err != nil {
				t.Fatalf("want one valid document, got %+v", docs)
			}
			var got any
			switch o := docs[0].obj.(type) {
			case *v1.Service:
				if o.Namespace == "" {
					t.Errorf("namespace not defaulted")
				}
				got = o.Spec
				if _, whole := tc.want.(v1.Service); whole {
					got = v1.Service{Spec: o.Spec, Status: o.Status}
				}
			case *discovery.EndpointSlice:
				if o.Namespace != "default" {
					t.Errorf("namespace %q, want default", o.Namespace)
				}
				got = o.Ports
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSampleManifest keeps deploy/samples/services.yaml loadable.
func TestSampleManifest(t *testing.T) {
	data, err := os.ReadFile("../../deploy/samples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := newDecoder().decodeFile("services.yaml", data, false)
	kinds := map[string]int{}
	for _, d := range docs {
		if d.err != nil {
			t.Errorf("sample rejected: %v", d.err)
			continue
		}
		kinds[d.key.Kind]++
	}
	if kinds[kindNode] != 1 || kinds[kindService] < 4 || kinds[kindEndpointSlice] < kinds[kindService] {
		t.Errorf("sample holds %v; want one Node, at least 4 Services, each with a slice", kinds)
	}
}

// TestDecodeAccepts lists valid documents the API server would take that a
// stricter-than-needed check could wrongly refuse.
func TestDecodeAccepts(t *testing.T) {
	cases := []struct {
		name, file, data string
	}{
		{"headless without ports", "f.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: db}\nspec: {clusterIP: None}\n"},
		{"ExternalName", "f.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: ext}\nspec: {type: ExternalName, externalName: example.com}\n"},
		{"SCTP and UDP ports", "f.yaml", validService + "    name: a\n  - {name: b, port: 80, protocol: UDP}\n  - {name: c, port: 80, protocol: SCTP}\n"},
		{"IPv6 only", "f.yaml", strings.Replace(validService, "198.18.0.10", "fd00::10", 1)},
		{"FQDN slice", "f.yaml", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: a, labels: {kubernetes.io/service-name: a}}\naddressType: FQDN\nendpoints: [{addresses: [db.example.com]}]\n"},
		{"slice port without a number", "f.yaml", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: a, labels: {kubernetes.io/service-name: a}}\naddressType: IPv4\nports: [{name: x}]\n"},
		{"node in a namespace", "f.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: node-1, namespace: default}\n"},
		{"single JSON object", "f.json", `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"clusterIP": "198.18.0.10", "ports": [{"port": 80}]}}`},
		{"comments, BOM and CRLF", "f.yaml", "\xef\xbb\xbf# header\r\n---\r\n" + strings.ReplaceAll(validService, "\n", "\r\n") + "---\r\n# trailing comment only\r\n"},
	}
	dec := newDecoder()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs := dec.decodeFile(tc.file, []byte(tc.data), strings.HasSuffix(tc.file, ".json"))
			if len(docs) != 1 {
				t.Fatalf("got %d documents, want 1", len(docs))
			}
			if docs[0].err != nil {
				t.Fatalf("rejected: %v", docs[0].err)
			}
		})
	}
}

// TestFixtures pins what the demo fixtures in testdata decode to.
func TestFixtures(t *testing.T) {
	cases := []struct {
		file      string
		wantValid int
		wantErrs  []string
	}{{
		file:      "broken.yaml",
		wantValid: 1,
		wantErrs: []string{
			"broken.yaml: document 2 at line 13 (Service default/port-too-big): spec.ports[0].port: 70000 is not a valid port (1-65535)",
			`broken.yaml: document 3 at line 22 (Service default/bad-ip): spec.clusterIP: "198.18.0.300" is not a valid IP address`,
			"broken.yaml: document 4 at line 31 (Deployment default/not-a-service): kind Deployment is not supported; a services file holds Service, EndpointSlice and Node objects",
			`broken.yaml: document 5 at line 36 (Service default/typo): unknown field "spec.portz"`,
			"broken.yaml: document 6 at line 45 (EndpointSlice default/orphan-abc): metadata.labels: EndpointSlice default/orphan-abc has no kubernetes.io/service-name label; kproxy cannot tell which Service it belongs to",
			"broken.yaml: document 7 at line 53: invalid YAML: line 55: did not find expected ',' or '}'",
		},
	}, {
		file:      "list.json",
		wantValid: 2,
		wantErrs:  []string{"list.json: document 1 item 3 (Service default/bad): spec.ports[0].port: 0 is not a valid port (1-65535)"},
	}}
	dec := newDecoder()
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			valid := 0
			var errs []string
			for _, d := range dec.decodeFile(tc.file, data, strings.HasSuffix(tc.file, ".json")) {
				if d.err != nil {
					errs = append(errs, d.err.Error())
				} else {
					valid++
				}
			}
			if valid != tc.wantValid {
				t.Errorf("%d valid documents, want %d", valid, tc.wantValid)
			}
			if diff := cmp.Diff(tc.wantErrs, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
