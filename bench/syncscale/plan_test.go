package syncscale

import (
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

func TestAddressPlan(t *testing.T) {
	serviceRange := netip.MustParsePrefix(lab.ServiceCIDR)
	reserved := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("198.18.255.0/24")}
	labHosts := []netip.Prefix{netip.MustParsePrefix(lab.ClientLinkCIDR), netip.MustParsePrefix(lab.PodCIDR)}

	seen := map[netip.Addr]int{}
	for i := range MaxServices {
		ip := ServiceIP(i)
		if !serviceRange.Contains(ip) {
			t.Fatalf("ServiceIP(%d) = %s, outside %s", i, ip, serviceRange)
		}
		for _, r := range reserved {
			if r.Contains(ip) {
				t.Fatalf("ServiceIP(%d) = %s, in the reserved %s", i, ip, r)
			}
		}
		if j, dup := seen[ip]; dup {
			t.Fatalf("ServiceIP(%d) = ServiceIP(%d) = %s", i, j, ip)
		}
		seen[ip] = i
	}
	for k := range nplServices {
		ip := NPLServiceIP(k)
		if !reserved[1].Contains(ip) || ip == netip.MustParseAddr("198.18.255.255") {
			t.Fatalf("NPLServiceIP(%d) = %s, want a host in %s", k, ip, reserved[1])
		}
	}

	for _, i := range []int{0, 1, 639, 640, 6399, 6400, 29999, MaxServices - 1} {
		eps := BulkEndpoints(i)
		if len(eps) != EndpointsPerSlice {
			t.Fatalf("BulkEndpoints(%d) has %d endpoints", i, len(eps))
		}
		within := map[netip.Addr]bool{}
		for _, ep := range eps {
			b := ep.As4()
			if b[0] != 198 || b[1] != 19 || b[2] < 2 || b[2] > 253 || b[3] == 0 || b[3] == 255 {
				t.Errorf("endpoint %s of service %d is outside 198.19.2.1–198.19.253.254 or a .0/.255 host", ep, i)
			}
			for _, h := range labHosts {
				if h.Contains(ep) {
					t.Errorf("endpoint %s of service %d is a lab host's address", ep, i)
				}
			}
			if within[ep] {
				t.Errorf("service %d has endpoint %s twice", i, ep)
			}
			within[ep] = true
			if ep == ChangeEndpoint().Addr() {
				t.Errorf("service %d already has the change endpoint %s", i, ep)
			}
		}
	}
}

func TestBulkServiceObjects(t *testing.T) {
	svc, slice := BulkService(7)
	if svc.Name != "svc-00007" || svc.Spec.ClusterIP != "198.18.1.7" || svc.Spec.Ports[0].Port != ServicePort ||
		svc.Spec.Ports[0].TargetPort.IntValue() != EndpointPort || svc.Spec.Ports[0].Name != PortName {
		t.Errorf("service 7 = %s %s %+v", svc.Name, svc.Spec.ClusterIP, svc.Spec.Ports)
	}
	if slice.Labels["kubernetes.io/service-name"] != svc.Name || *slice.Ports[0].Name != PortName || *slice.Ports[0].Port != EndpointPort {
		t.Errorf("slice of service 7 = %s labels %v ports %+v", slice.Name, slice.Labels, slice.Ports)
	}
	if len(slice.Endpoints) != EndpointsPerSlice || !*slice.Endpoints[0].Conditions.Ready {
		t.Errorf("slice of service 7 has %d endpoints, first %+v", len(slice.Endpoints), slice.Endpoints[0])
	}
	if got := PortNameOf(svc.Name).String(); got != "default/svc-00007:http/TCP" {
		t.Errorf("PortNameOf = %s", got)
	}
}
