// Package catalogue is the one list of Service and EndpointSlice situations
// that every proxy mode renders into its own golden files
// (<mode package>/testdata/scenarios/<name>.golden), so that one new case
// shows each mode's output side by side. Scenarios are API objects run
// through the real service map, as kproxy sees them, so what the map skips
// (headless, ExternalName, ipMode Proxy) is covered too.
//
// Addresses: cluster IPs 198.18.0.0/24 and fd00:18::/64, external IPs
// 198.18.100.0/24, load-balancer IPs 198.18.200.0/24, this node
// (testkit.NodeName) 198.19.0.1 and fd00:19::1 in zone-a, pods
// 198.19.1.0/24 and fd00:19:1::/64, on testkit.OtherNode unless local.
package catalogue

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Scenario is one named cluster situation: Services and EndpointSlices as
// the API serves them, seen by testkit.NodeName (catalogue.Node()).
type Scenario struct {
	// Name is the golden file's base name.
	Name string
	// Doc says what the scenario exercises.
	Doc      string
	Services []*v1.Service
	Slices   []*discovery.EndpointSlice
}

// Snapshot runs the scenario's objects through a servicemap.Tracker of
// testkit.NodeName, as the sync engine does.
func (s Scenario) Snapshot() *servicemap.Snapshot {
	tr := servicemap.NewTracker(testkit.NodeName, nil)
	tr.OnNodeUpdate(Node())
	for _, svc := range s.Services {
		tr.OnServiceUpdate(svc)
	}
	for _, sl := range s.Slices {
		tr.OnEndpointSliceUpdate(sl)
	}
	tr.OnSynced()
	snap, _ := tr.Snapshot()
	return snap
}

// Families are the families a mode renders for snap: IPv4 always, IPv6
// when some port has an IPv6 cluster IP. IPv4 is always shown so that an
// empty snapshot shows each mode's base rules.
func Families(snap *servicemap.Snapshot) []ipfamily.Family {
	fams := []ipfamily.Family{ipfamily.IPv4}
	for _, sp := range snap.All() {
		if slices.ContainsFunc(sp.ClusterIPs, servicemap.IsIPv6) {
			return append(fams, ipfamily.IPv6)
		}
	}
	return fams
}

// Short names that keep the scenarios readable.
const (
	tcp  = v1.ProtocolTCP
	udp  = v1.ProtocolUDP
	sctp = v1.ProtocolSCTP
	ns   = "default"
)

// web is default/<name> at clusterIP:80 (port "http"), with opts.
func web(name, clusterIP string, nodePort int32, opts ...ServiceOpt) *v1.Service {
	return Service(ns, name, IPs(clusterIP), Ports(Port("http", tcp, 80, nodePort)), opts...)
}

// webSlice gives default/<svc>'s "http" port the endpoints, on 8080.
func webSlice(svc string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return Slice(ns, svc, SlicePorts(SlicePort("http", tcp, 8080)), eps...)
}

// three is 198.19.1.11-13, ready on another node.
func three() []discovery.Endpoint {
	return []discovery.Endpoint{Endpoint("198.19.1.11"), Endpoint("198.19.1.12"), Endpoint("198.19.1.13")}
}

// All returns every scenario, in a fixed order; names are unique.
func All() []Scenario {
	return []Scenario{
		{
			Name:     "clusterip-tcp",
			Doc:      "a ClusterIP TCP service with three ready endpoints on another node",
			Services: []*v1.Service{web("web", "198.18.0.10", 0)},
			Slices:   []*discovery.EndpointSlice{webSlice("web", three()...)},
		},
		{
			Name: "clusterip-udp",
			Doc:  "a ClusterIP UDP service (DNS) with two endpoints",
			Services: []*v1.Service{Service("kube-system", "dns", IPs("198.18.0.53"),
				Ports(Port("dns", udp, 53, 0)))},
			Slices: []*discovery.EndpointSlice{Slice("kube-system", "dns", SlicePorts(SlicePort("dns", udp, 5353)),
				Endpoint("198.19.1.21"), Endpoint("198.19.1.22"))},
		},
		{
			Name: "multiple-ports",
			Doc:  "one service, three ports (two TCP, one UDP), each with its own target port",
			Services: []*v1.Service{Service("shop", "api", IPs("198.18.0.11"),
				Ports(Port("http", tcp, 80, 0), Port("grpc", tcp, 9090, 0), Port("metrics", udp, 9125, 0)))},
			Slices: []*discovery.EndpointSlice{Slice("shop", "api",
				SlicePorts(SlicePort("http", tcp, 8080), SlicePort("grpc", tcp, 9090), SlicePort("metrics", udp, 9125)),
				Endpoint("198.19.1.31"), Endpoint("198.19.1.32"))},
		},
		{
			Name:     "nodeport",
			Doc:      "a NodePort service, externalTrafficPolicy Cluster (spelled out)",
			Services: []*v1.Service{web("web", "198.18.0.12", 30080, NodePortType, ExternalCluster)},
			Slices:   []*discovery.EndpointSlice{webSlice("web", three()...)},
		},
		{
			Name:     "external-ips",
			Doc:      "a ClusterIP service with two externalIPs",
			Services: []*v1.Service{web("public", "198.18.0.13", 0, ExternalIPs("198.18.100.1", "198.18.100.2"))},
			Slices:   []*discovery.EndpointSlice{webSlice("public", three()...)},
		},
		{
			Name: "loadbalancer",
			Doc:  "a LoadBalancer with one VIP ingress, open to every source",
			Services: []*v1.Service{Service(ns, "lb", IPs("198.18.0.14"), Ports(Port("https", tcp, 443, 30443)),
				LoadBalancer("198.18.200.1"))},
			Slices: []*discovery.EndpointSlice{Slice(ns, "lb", SlicePorts(SlicePort("https", tcp, 8443)),
				Endpoint("198.19.1.11"), Endpoint("198.19.1.12"))},
		},
		{
			Name: "loadbalancer-source-ranges",
			Doc: "a LoadBalancer with loadBalancerSourceRanges; the first range holds the node's address, " +
				"so the node may reach its own VIP",
			Services: []*v1.Service{Service(ns, "lb", IPs("198.18.0.15"), Ports(Port("https", tcp, 443, 30444)),
				LoadBalancer("198.18.200.2"), SourceRanges("198.19.0.0/24", "198.19.2.0/24"))},
			Slices: []*discovery.EndpointSlice{Slice(ns, "lb", SlicePorts(SlicePort("https", tcp, 8443)),
				Endpoint("198.19.1.11"), Endpoint("198.19.1.12"))},
		},
		{
			Name: "loadbalancer-ipmode-proxy",
			Doc:  "a LoadBalancer with one VIP ingress and one ipMode Proxy ingress, which is not programmed",
			Services: []*v1.Service{web("lb", "198.18.0.16", 30081, LoadBalancer("198.18.200.3"),
				ProxyIngress("198.18.200.4"))},
			Slices: []*discovery.EndpointSlice{webSlice("lb", three()...)},
		},
		{
			Name:     "session-affinity-clientip",
			Doc:      "ClientIP session affinity with a 600 s timeout, on a NodePort",
			Services: []*v1.Service{web("sticky", "198.18.0.17", 30082, NodePortType, ClientIPAffinity(600))},
			Slices:   []*discovery.EndpointSlice{webSlice("sticky", Endpoint("198.19.1.11"), Endpoint("198.19.1.12"))},
		},
		{
			Name:     "external-policy-local",
			Doc:      "a NodePort with externalTrafficPolicy Local and one local endpoint of two",
			Services: []*v1.Service{web("ingress", "198.18.0.18", 30083, NodePortType, ExternalLocal(0))},
			Slices: []*discovery.EndpointSlice{webSlice("ingress",
				Endpoint("198.19.1.11"), Endpoint("198.19.1.12", OnThisNode))},
		},
		{
			Name: "external-policy-local-no-local-endpoints",
			Doc: "a LoadBalancer with externalTrafficPolicy Local, a health-check node port and an externalIP, " +
				"whose endpoints all run elsewhere: external traffic is dropped, cluster traffic served",
			Services: []*v1.Service{web("ingress", "198.18.0.19", 30084, LoadBalancer("198.18.200.5"),
				ExternalLocal(32000), ExternalIPs("198.18.100.3"))},
			Slices: []*discovery.EndpointSlice{webSlice("ingress", Endpoint("198.19.1.11"), Endpoint("198.19.1.13"))},
		},
		{
			Name: "internal-policy-local",
			Doc: "internalTrafficPolicy Local: one service with a local endpoint, one without " +
				"(its cluster IP traffic is dropped)",
			Services: []*v1.Service{
				web("node-cache", "198.18.0.20", 0, InternalLocal),
				web("elsewhere", "198.18.0.21", 0, InternalLocal),
			},
			Slices: []*discovery.EndpointSlice{
				webSlice("node-cache", Endpoint("198.19.1.11"), Endpoint("198.19.1.12", OnThisNode)),
				webSlice("elsewhere", Endpoint("198.19.1.13")),
			},
		},
		{
			Name: "no-endpoints",
			Doc: "a NodePort service with an externalIP and no EndpointSlice, and one whose only endpoint " +
				"is not ready: both refuse clients",
			Services: []*v1.Service{
				web("empty", "198.18.0.22", 30085, NodePortType, ExternalIPs("198.18.100.4")),
				web("down", "198.18.0.23", 0),
			},
			Slices: []*discovery.EndpointSlice{webSlice("down", Endpoint("198.19.1.11", NotReady))},
		},
		{
			Name: "terminating-endpoints",
			Doc: "one service whose endpoints are all serving and terminating (used as a fallback), one with " +
				"a ready endpoint beside terminating ones (only the ready one is used), and a terminating " +
				"endpoint that no longer serves (never used)",
			Services: []*v1.Service{
				web("draining", "198.18.0.24", 0),
				web("rolling", "198.18.0.25", 0),
			},
			Slices: []*discovery.EndpointSlice{
				webSlice("draining", Endpoint("198.19.1.11", ServingTerminating),
					Endpoint("198.19.1.12", ServingTerminating), Endpoint("198.19.1.13", NotServing)),
				webSlice("rolling", Endpoint("198.19.1.14"), Endpoint("198.19.1.15", ServingTerminating)),
			},
		},
		{
			Name: "dual-stack",
			Doc:  "a dual-stack NodePort service (IPv4 primary) with endpoints of both families, and an IPv4-only one",
			Services: []*v1.Service{
				Service(ns, "dual", IPs("198.18.0.26", "fd00:18::26"), Ports(Port("http", tcp, 80, 30086)), NodePortType),
				web("v4only", "198.18.0.27", 0),
			},
			Slices: []*discovery.EndpointSlice{
				webSlice("dual", Endpoint("198.19.1.11"), Endpoint("198.19.1.12")),
				webSlice("dual", Endpoint("fd00:19:1::11"), Endpoint("fd00:19:1::12", OnThisNode)),
				webSlice("v4only", Endpoint("198.19.1.13")),
			},
		},
		{
			Name: "ipv6-loadbalancer",
			Doc:  "an IPv6-only LoadBalancer with a source range and ClientIP affinity",
			Services: []*v1.Service{Service(ns, "v6", IPs("fd00:18::28"), Ports(Port("http", tcp, 80, 30087)),
				LoadBalancer("fd00:18::200:1"), SourceRanges("fd00:19::/64"), ClientIPAffinity(0))},
			Slices: []*discovery.EndpointSlice{webSlice("v6", Endpoint("fd00:19:1::11"), Endpoint("fd00:19:1::12"))},
		},
		{
			Name: "sctp",
			Doc:  "an SCTP NodePort service (Diameter)",
			Services: []*v1.Service{Service("telecom", "diameter", IPs("198.18.0.29"),
				Ports(Port("", sctp, 3868, 30868)), NodePortType)},
			Slices: []*discovery.EndpointSlice{Slice("telecom", "diameter", SlicePorts(SlicePort("", sctp, 3868)),
				Endpoint("198.19.1.41"), Endpoint("198.19.1.42"))},
		},
		{
			Name:     "topology-hints",
			Doc:      "endpoints hinted for zone-a (this node's zone) and zone-b: only zone-a's are used",
			Services: []*v1.Service{web("zonal", "198.18.0.30", 0)},
			Slices: []*discovery.EndpointSlice{webSlice("zonal", Endpoint("198.19.1.11", ForZones("zone-a")),
				Endpoint("198.19.1.12", ForZones("zone-b")), Endpoint("198.19.1.13", ForZones("zone-a")))},
		},
		{
			Name: "headless-and-externalname",
			Doc:  "a headless service with endpoints and an ExternalName service: both skipped, nothing is programmed",
			Services: []*v1.Service{
				web("headless", v1.ClusterIPNone, 0),
				Service(ns, "alias", nil, Ports(Port("http", tcp, 80, 0)), ExternalName("web.example.com")),
			},
			Slices: []*discovery.EndpointSlice{webSlice("headless", three()...)},
		},
	}
}

// RenderEach is a mode's catalogue test: for every scenario it calls
// render once per family of Families (render writes its own header for the
// family, and an error as text: a refusal is a result too), and compares
// the scenario's Doc line and the renderings with
// testdata/scenarios/<name>.golden in the calling package. A golden file
// of no scenario fails the test (KPROXY_UPDATE_GOLDEN=1 removes it), so a
// renamed scenario leaves nothing stale behind.
func RenderEach(t *testing.T, render func(t *testing.T, snap *servicemap.Snapshot, fam ipfamily.Family) string) {
	t.Helper()
	dir := filepath.Join("testdata", "scenarios")
	known := map[string]bool{}
	for _, sc := range All() {
		known[sc.Name+".golden"] = true
	}
	files, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, f := range files {
		switch {
		case known[f.Name()]:
		case testkit.Updating():
			if err := os.Remove(filepath.Join(dir, f.Name())); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("%s belongs to no scenario of the catalogue (%s=1 removes it)", filepath.Join(dir, f.Name()), testkit.UpdateEnv)
		}
	}
	for _, sc := range All() {
		t.Run(sc.Name, func(t *testing.T) {
			snap := sc.Snapshot()
			var sb strings.Builder
			sb.WriteString("# " + sc.Doc + "\n")
			for _, fam := range Families(snap) {
				sb.WriteString("\n" + render(t, snap, fam))
			}
			testkit.Golden(t, filepath.Join(dir, sc.Name+".golden"), sb.String())
		})
	}
}
