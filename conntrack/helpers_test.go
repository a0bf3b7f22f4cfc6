package conntrack

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/servicemap"
)

// Test fixtures: service ports are built by hand, from compact strings.

func addrs(list ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range list {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func portName(svc string, proto v1.Protocol) servicemap.ServicePortName {
	return servicemap.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: "default", Name: svc},
		Port:           strings.ToLower(string(proto)),
		Protocol:       proto,
	}
}

// svcPort is a service port under construction.
type svcPort struct{ sp *servicemap.ServicePort }

// port starts a service port of service svc on the given port number with
// the given cluster IPs.
func port(svc string, proto v1.Protocol, number uint16, clusterIPs ...string) svcPort {
	return svcPort{&servicemap.ServicePort{Name: portName(svc, proto), Port: number, ClusterIPs: addrs(clusterIPs...)}}
}

func (p svcPort) external(ips ...string) svcPort {
	p.sp.ExternalIPs = addrs(ips...)
	return p
}

func (p svcPort) lb(ips ...string) svcPort {
	p.sp.LoadBalancerIPs = addrs(ips...)
	return p
}

func (p svcPort) nodePort(n uint16) svcPort {
	p.sp.NodePort = n
	return p
}

// serving adds ready, serving endpoints ("ip:port").
func (p svcPort) serving(eps ...string) svcPort {
	for _, e := range eps {
		a := ap(e)
		p.sp.Endpoints = append(p.sp.Endpoints, servicemap.Endpoint{Addr: a.Addr(), Port: a.Port(), Ready: true, Serving: true})
	}
	return p
}

// notServing adds endpoints that are terminating and no longer serving.
func (p svcPort) notServing(eps ...string) svcPort {
	for _, e := range eps {
		a := ap(e)
		p.sp.Endpoints = append(p.sp.Endpoints, servicemap.Endpoint{Addr: a.Addr(), Port: a.Port(), Terminating: true})
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
