package portal

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// snapshotWithSlices runs Services and EndpointSlices through the service
// map of node-a.
func snapshotWithSlices(t testing.TB, svcs []*v1.Service, slices []*discovery.EndpointSlice) *servicemap.Snapshot {
	t.Helper()
	return catalogue.Scenario{Services: svcs, Slices: slices}.Snapshot()
}

// webSlice is an EndpointSlice of default/web's "http" port (8080) holding
// the given endpoints, of their family.
func webSlice(eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return catalogue.Slice("default", "web", catalogue.SlicePorts(catalogue.SlicePort("http", v1.ProtocolTCP, 8080)), eps...)
}

// TestEndpointStateOfWithTheBalancer asks the real balancer whether each
// class has an endpoint, as redirect/modes/userspace does, and checks the state
// the portals get: REJECT when nothing serves anywhere, DROP when only a
// Local policy empties the class.
func TestEndpointStateOfWithTheBalancer(t *testing.T) {
	etpLocal := func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }
	itpLocal := func(s *v1.Service) {
		p := v1.ServiceInternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = &p
	}
	cases := []struct {
		name   string
		svc    *v1.Service
		slices []*discovery.EndpointSlice
		want   ClassEndpoints
	}{
		{
			name:   "ready endpoint elsewhere serves both classes",
			svc:    nodePortWeb(nil),
			slices: []*discovery.EndpointSlice{webSlice(catalogue.Endpoint("198.19.1.11"))},
			want:   ClassEndpoints{},
		},
		{
			name: "no slice at all",
			svc:  nodePortWeb(nil),
			want: ClassEndpoints{Internal: NoEndpoints, External: NoEndpoints},
		},
		{
			name:   "only unready, not serving endpoints",
			svc:    nodePortWeb(nil),
			slices: []*discovery.EndpointSlice{webSlice(catalogue.Endpoint("198.19.1.11", catalogue.OnThisNode, catalogue.Conditions(false, false, false)))},
			want:   ClassEndpoints{Internal: NoEndpoints, External: NoEndpoints},
		},
		{
			name:   "serving-terminating fallback still serves",
			svc:    nodePortWeb(nil),
			slices: []*discovery.EndpointSlice{webSlice(catalogue.Endpoint("198.19.1.11", catalogue.Conditions(false, true, true)))},
			want:   ClassEndpoints{},
		},
		{
			name:   "externalTrafficPolicy Local, endpoints only elsewhere",
			svc:    nodePortWeb(etpLocal),
			slices: []*discovery.EndpointSlice{webSlice(catalogue.Endpoint("198.19.1.11"))},
			want:   ClassEndpoints{External: NoLocalEndpoints},
		},
		{
			name:   "internalTrafficPolicy Local, endpoints only elsewhere",
			svc:    nodePortWeb(itpLocal),
			slices: []*discovery.EndpointSlice{webSlice(catalogue.Endpoint("198.19.1.11"))},
			want:   ClassEndpoints{Internal: NoLocalEndpoints},
		},
		{
			name: "externalTrafficPolicy Local, a local serving-terminating endpoint",
			svc:  nodePortWeb(etpLocal),
			slices: []*discovery.EndpointSlice{webSlice(catalogue.Endpoint("198.19.1.11"),
				catalogue.Endpoint("198.19.1.12", catalogue.OnThisNode, catalogue.Conditions(false, true, true)))},
			want: ClassEndpoints{},
		},
		{
			name:   "both policies Local, nothing ready anywhere",
			svc:    nodePortWeb(func(s *v1.Service) { etpLocal(s); itpLocal(s) }),
			slices: []*discovery.EndpointSlice{webSlice(catalogue.Endpoint("198.19.1.11", catalogue.Conditions(false, false, true)))},
			want:   ClassEndpoints{Internal: NoEndpoints, External: NoEndpoints},
		},
		{
			name:   "endpoints of the other family only",
			svc:    nodePortWeb(nil),
			slices: []*discovery.EndpointSlice{webSlice(catalogue.Endpoint("fd00:19:1::11", catalogue.OnThisNode))},
			want:   ClassEndpoints{Internal: NoEndpoints, External: NoEndpoints},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := snapshotWithSlices(t, []*v1.Service{tc.svc}, tc.slices)
			var sp *servicemap.ServicePort
			for _, p := range snap.All() {
				sp = p
			}
			if sp == nil {
				t.Fatal("the service map produced no service port")
			}
			bal, err := balancer.New(balancer.Config{NodeName: "node-a"})
			if err != nil {
				t.Fatal(err)
			}
			bal.Update(snap)
			state := func(c balancer.Class) EndpointState {
				picks := bal.Picker(balancer.Key{Port: sp.Name, Class: c, Family: ipfamily.IPv4}).Pick(netip.Addr{})
				return EndpointStateOf(sp, ipfamily.IPv4, len(picks) > 0)
			}
			got := ClassEndpoints{Internal: state(balancer.Internal), External: state(balancer.External)}
			if got != tc.want {
				t.Errorf("endpoint states %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEndpointStateOfNilPort(t *testing.T) {
	if got := EndpointStateOf(nil, ipfamily.IPv4, false); got != NoEndpoints {
		t.Errorf("EndpointStateOf(nil, unusable) = %v, want %v", got, NoEndpoints)
	}
	if got := EndpointStateOf(nil, ipfamily.IPv4, true); got != HasEndpoints {
		t.Errorf("EndpointStateOf(nil, usable) = %v, want %v", got, HasEndpoints)
	}
}

// TestRefusalKeepsPortalsAndTargetsOneClass checks the design: a class
// without endpoints keeps its nat portals (refusal happens in filter INPUT,
// after the redirect), gets one rule per portal destination in
// KUBE-PROXY-PORTS, and a served class sharing its proxy port is untouched.
func TestRefusalKeepsPortalsAndTargetsOneClass(t *testing.T) {
	snap := snapshotOf(t, service("default", "web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ExternalIPs = []string{"198.18.5.5"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.18.9.9"}}
	}, catalogue.Port("http", v1.ProtocolTCP, 80, 30080), catalogue.Port("dns", v1.ProtocolUDP, 53, 30053)))
	build := func(e ClassEndpoints) *Ruleset {
		t.Helper()
		portals := PortalsFrom(snap, sequentialProxyPorts(snap, true))
		for i := range portals {
			portals[i].Endpoints = e
		}
		rs, err := Build(ipfamily.IPv4, testNode, portals)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	refusals := func(rs *Ruleset) []string {
		var out []string
		for _, r := range rs.Filter.Rules {
			if s := r.String(); strings.Contains(s, "--ctorigdstport") {
				out = append(out, s)
			}
		}
		return out
	}
	served := build(ClassEndpoints{})
	if got := refusals(served); len(got) != 0 {
		t.Fatalf("a served port got refusal rules:\n%s", strings.Join(got, "\n"))
	}

	cases := []struct {
		name      string
		endpoints ClassEndpoints
		// want lists, per rule, fragments it must hold, in rule order.
		want [][]string
	}{
		{
			name:      "internal class without endpoints",
			endpoints: ClassEndpoints{Internal: NoEndpoints},
			want: [][]string{
				{"-p udp", `"default/web:dns has no endpoints"`, "--dport 40000", "--ctstate NEW --ctorigdst 198.18.0.10 --ctorigdstport 53", "-j REJECT --reject-with icmp-port-unreachable"},
				{"-p tcp", `"default/web:http has no endpoints"`, "--dport 40001", "--ctstate NEW --ctorigdst 198.18.0.10 --ctorigdstport 80", "-j REJECT --reject-with tcp-reset"},
			},
		},
		{
			name:      "external class without local endpoints",
			endpoints: ClassEndpoints{External: NoLocalEndpoints},
			want: [][]string{
				{"-p udp", `"default/web:dns has no local endpoints"`, "--ctorigdst 198.18.5.5 --ctorigdstport 53", "-j KUBE-PROXY-NO-LOCAL"},
				{"-p udp", "--ctorigdst 198.18.9.9 --ctorigdstport 53", "-j KUBE-PROXY-NO-LOCAL"},
				{"-p udp", "--ctstate NEW --ctorigdstport 30053 -j KUBE-PROXY-NO-LOCAL"},
				{"-p tcp", `"default/web:http has no local endpoints"`, "--ctorigdst 198.18.5.5 --ctorigdstport 80", "-j KUBE-PROXY-NO-LOCAL"},
				{"-p tcp", "--ctorigdst 198.18.9.9 --ctorigdstport 80", "-j KUBE-PROXY-NO-LOCAL"},
				{"-p tcp", "--ctstate NEW --ctorigdstport 30080 -j KUBE-PROXY-NO-LOCAL"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := build(tc.endpoints)
			if !equalRules(rs.NAT.Rules, served.NAT.Rules) {
				t.Errorf("the nat portals changed; they must stay so the refusal sees redirected traffic:\n%s\nvs\n%s",
					Payload(rs, nil), Payload(served, nil))
			}
			got := refusals(rs)
			if len(got) != len(tc.want) {
				t.Fatalf("%d refusal rules, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, frags := range tc.want {
				if !strings.HasPrefix(got[i], "-A "+ChainProxyPorts+" ") {
					t.Errorf("rule %q is not in %s", got[i], ChainProxyPorts)
				}
				for _, f := range frags {
					if !strings.Contains(got[i], f) {
						t.Errorf("rule %d %q lacks %q", i, got[i], f)
					}
				}
			}
			// The open-relay guards are unchanged.
			if g, w := countGuards(rs), countGuards(served); g != w {
				t.Errorf("%d open-relay guards, want %d", g, w)
			}
		})
	}
}

func equalRules(a, b []Rule) bool {
	return slices.EqualFunc(a, b, func(x, y Rule) bool { return x.String() == y.String() })
}

func countGuards(rs *Ruleset) int {
	n := 0
	for _, r := range rs.Filter.Rules {
		if strings.Contains(r.String(), "! --ctstate DNAT") {
			n++
		}
	}
	return n
}
