package conntrack

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Test fixtures: service ports are built by hand, from compact strings,
// with bench/testkit.

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// portName is default/<svc>, its port named after the protocol.
func portName(svc string, proto v1.Protocol) servicemap.ServicePortName {
	return testkit.PortName("default", svc, strings.ToLower(string(proto)), proto)
}

// svcPort is a service port under construction.
type svcPort struct{ sp *servicemap.ServicePort }

// port starts a service port of service svc on the given port number with
// the given cluster IPs.
func port(svc string, proto v1.Protocol, number uint16, clusterIPs ...string) svcPort {
	return svcPort{testkit.Port("default", svc, number, strings.Join(clusterIPs, ","),
		testkit.Named(strings.ToLower(string(proto))), testkit.Protocol(proto))}
}

func (p svcPort) with(opts ...testkit.PortOpt) svcPort {
	for _, o := range opts {
		o(p.sp)
	}
	return p
}

func (p svcPort) external(ips ...string) svcPort { return p.with(testkit.ExternalIPs(ips...)) }
func (p svcPort) lb(ips ...string) svcPort       { return p.with(testkit.LoadBalancerIPs(ips...)) }
func (p svcPort) nodePort(n uint16) svcPort      { return p.with(testkit.NodePort(n)) }

// serving adds ready, serving endpoints ("ip:port").
func (p svcPort) serving(eps ...string) svcPort {
	for _, e := range eps {
		p.sp.Endpoints = append(p.sp.Endpoints, testkit.EP(e))
	}
	return p
}

// notServing adds endpoints that are terminating and no longer serving.
func (p svcPort) notServing(eps ...string) svcPort {
	for _, e := range eps {
		p.sp.Endpoints = append(p.sp.Endpoints, testkit.EP(e, testkit.Gone))
	}
	return p
}

func snapshot(gen uint64, ports ...svcPort) *servicemap.Snapshot {
	var sps []*servicemap.ServicePort
	for _, p := range ports {
		sps = append(sps, p.sp)
	}
	return servicemap.NewSnapshot(gen, nil, sps...)
}

func stale(svc string, proto v1.Protocol, ep string) servicemap.StaleEndpoint {
	a := ap(ep)
	return servicemap.StaleEndpoint{ServicePort: portName(svc, proto),
		Endpoint: servicemap.Endpoint{Addr: a.Addr(), Port: a.Port(), Serving: true, Ready: true}}
}

func strs[T interface{ String() string }](list []T) []string {
	var out []string
	for _, v := range list {
		out = append(out, v.String())
	}
	return out
}
