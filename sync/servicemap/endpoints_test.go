package servicemap

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// endpointsOf feeds objects to a fresh tracker and returns the endpoints of
// every service port in the first snapshot.
func endpointsOf(t *testing.T, svcs []*v1.Service, eslices []*discovery.EndpointSlice) map[ServicePortName][]Endpoint {
	t.Helper()
	tr := NewTracker(testNode, nil)
	for _, s := range svcs {
		tr.OnServiceUpdate(s)
	}
	for _, s := range eslices {
		tr.OnEndpointSliceUpdate(s)
	}
	snap, _ := tr.Snapshot()
	out := map[ServicePortName][]Endpoint{}
	for name, p := range snap.All() {
		out[name] = p.Endpoints
	}
	return out
}

func TestEndpoints(t *testing.T) {
	http := portName("ns", "s", "http")
	web := []discovery.EndpointPort{slicePortOf("http", 8080)}
	twoPorts := makeService("ns", "s", "198.18.0.1", withPorts(
		v1.ServicePort{Name: "http", Protocol: v1.ProtocolTCP, Port: 80},
		v1.ServicePort{Name: "metrics", Protocol: v1.ProtocolTCP, Port: 9090},
	))
	dualStack := makeService("ns", "s", "198.18.0.1", func(s *v1.Service) {
		s.Spec.ClusterIPs = []string{"198.18.0.1", "fd00::18:1"}
	})
	v6Slice := makeSlice("ns", "s-v6", "s", web, ep("fd00::19:1"))
	v6Slice.AddressType = discovery.AddressTypeIPv6
	fqdn := makeSlice("ns", "s-fqdn", "s", web, ep("198.19.0.9"))
	fqdn.AddressType = discovery.AddressTypeFQDN
	noLabel := makeSlice("ns", "s-nolabel", "s", web, ep("198.19.0.9"))
	noLabel.Labels = map[string]string{}
	proxyName := makeSlice("ns", "s-proxy", "s", web, ep("198.19.0.9"))
	proxyName.Labels[LabelServiceProxyName] = "other"
	headless := makeSlice("ns", "s-headless", "s", web, ep("198.19.0.9"))
	headless.Labels[v1.IsHeadlessService] = ""

	tests := []struct {
		name    string
		svcs    []*v1.Service
		eslices []*discovery.EndpointSlice
		want    map[ServicePortName][]Endpoint
	}{{
		name: "no slices, no endpoints",
		svcs: []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		want: map[ServicePortName][]Endpoint{http: nil},
	}, {
		name: "nil conditions default to ready, serving, not terminating; sorted",
		svcs: []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		eslices: []*discovery.EndpointSlice{makeSlice("ns", "s-1", "s", web,
			ep("198.19.0.2", onNode("node-b")), ep("198.19.0.1", onNode(testNode)))},
		want: map[ServicePortName][]Endpoint{http: {
			wantEP("198.19.0.1:8080", true, true, false, true, testNode),
			wantEP("198.19.0.2:8080", true, true, false, false, "node-b"),
		}},
	}, {
		name: "explicit conditions",
		svcs: []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		eslices: []*discovery.EndpointSlice{makeSlice("ns", "s-1", "s", web,
			ep("198.19.0.1", ready(false), serving(true), terminating(true)),
			ep("198.19.0.2", ready(false), serving(false), terminating(false)),
			ep("198.19.0.3", ready(false)))},
		want: map[ServicePortName][]Endpoint{http: {
			wantEP("198.19.0.1:8080", false, true, true, false, ""),
			wantEP("198.19.0.2:8080", false, false, false, false, ""),
			wantEP("198.19.0.3:8080", false, true, false, false, ""),
		}},
	}, {
		name: "named target port resolves per slice",
		svcs: []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		eslices: []*discovery.EndpointSlice{
			makeSlice("ns", "s-a", "s", []discovery.EndpointPort{slicePortOf("http", 8080)}, ep("198.19.0.1")),
			makeSlice("ns", "s-b", "s", []discovery.EndpointPort{slicePortOf("http", 9000)}, ep("198.19.0.2")),
		},
		want: map[ServicePortName][]Endpoint{http: {
			wantEP("198.19.0.1:8080", true, true, false, false, ""),
			wantEP("198.19.0.2:9000", true, true, false, false, ""),
		}},
	}, {
		name: "two service ports from one slice, unknown port name ignored",
		svcs: []*v1.Service{twoPorts},
		eslices: []*discovery.EndpointSlice{makeSlice("ns", "s-a", "s", []discovery.EndpointPort{
			slicePortOf("http", 8080), slicePortOf("metrics", 9100), slicePortOf("debug", 6060),
			{Name: ptr("metrics"), Port: ptr(int32(9101)), Protocol: ptr(v1.ProtocolUDP)},
		}, ep("198.19.0.1"))},
		want: map[ServicePortName][]Endpoint{
			http:                           {wantEP("198.19.0.1:8080", true, true, false, false, "")},
			portName("ns", "s", "metrics"): {wantEP("198.19.0.1:9100", true, true, false, false, "")},
		},
	}, {
		name: "multi-slice duplicates: local preferred, then non-terminating",
		svcs: []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		eslices: []*discovery.EndpointSlice{
			makeSlice("ns", "s-a", "s", web, ep("198.19.0.1", onNode("node-b")), ep("198.19.0.2", terminating(true), serving(false), onNode(testNode)), ep("198.19.0.3", onNode("node-b"))),
			makeSlice("ns", "s-b", "s", web, ep("198.19.0.1", onNode(testNode)), ep("198.19.0.2", onNode("node-c")), ep("198.19.0.3", onNode("node-c"))),
		},
		want: map[ServicePortName][]Endpoint{http: {
			wantEP("198.19.0.1:8080", true, true, false, true, testNode),
			wantEP("198.19.0.2:8080", true, true, false, false, "node-c"),
			wantEP("198.19.0.3:8080", true, true, false, false, "node-b"), // tie: first slice by name
		}},
	}, {
		name: "dual-stack slices merge into one port",
		svcs: []*v1.Service{dualStack},
		eslices: []*discovery.EndpointSlice{
			makeSlice("ns", "s-v4", "s", web, ep("198.19.0.1")), v6Slice,
		},
		want: map[ServicePortName][]Endpoint{http: {
			wantEP("198.19.0.1:8080", true, true, false, false, ""),
			wantEP("[fd00::19:1]:8080", true, true, false, false, ""),
		}},
	}, {
		name:    "ignored slices: FQDN, no service label, proxy-name, headless",
		svcs:    []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		eslices: []*discovery.EndpointSlice{fqdn, noLabel, proxyName, headless},
		want:    map[ServicePortName][]Endpoint{http: nil},
	}, {
		name:    "slice of another namespace does not match",
		svcs:    []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		eslices: []*discovery.EndpointSlice{makeSlice("other", "s-1", "s", web, ep("198.19.0.1"))},
		want:    map[ServicePortName][]Endpoint{http: nil},
	}, {
		name: "ports with nil name, port or protocol and endpoints without addresses are skipped",
		svcs: []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		eslices: []*discovery.EndpointSlice{makeSlice("ns", "s-1", "s", []discovery.EndpointPort{
			{Port: ptr(int32(1)), Protocol: ptr(v1.ProtocolTCP)},
			{Name: ptr("http"), Protocol: ptr(v1.ProtocolTCP)},
			{Name: ptr("http"), Port: ptr(int32(2))},
			{Name: ptr("http"), Port: ptr(int32(0)), Protocol: ptr(v1.ProtocolTCP)},
			slicePortOf("http", 8080),
		}, ep("198.19.0.1"), discovery.Endpoint{}, ep("not-an-ip"))},
		want: map[ServicePortName][]Endpoint{http: {wantEP("198.19.0.1:8080", true, true, false, false, "")}},
	}, {
		name:    "skipped service has no ports even with slices",
		svcs:    []*v1.Service{makeService("ns", "s", v1.ClusterIPNone)},
		eslices: []*discovery.EndpointSlice{makeSlice("ns", "s-1", "s", web, ep("198.19.0.1"))},
		want:    map[ServicePortName][]Endpoint{},
	}, {
		name: "zone and hints carried",
		svcs: []*v1.Service{makeService("ns", "s", "198.18.0.1")},
		eslices: []*discovery.EndpointSlice{makeSlice("ns", "s-1", "s", web,
			ep("198.19.0.1", inZone("z1"), hints([]string{"z1", "z2"}, []string{testNode})))},
		want: map[ServicePortName][]Endpoint{http: {{
			Addr: addrs("198.19.0.1")[0], Port: 8080, Ready: true, Serving: true, Zone: "z1",
			ZoneHints: []string{"z1", "z2"}, NodeHints: []string{testNode},
		}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := endpointsOf(t, tt.svcs, tt.eslices)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(addrs("0.0.0.0")[0]), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}
