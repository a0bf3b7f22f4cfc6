package kernelmode

import (
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/servicemap"
)

func TestPortName(t *testing.T) {
	tests := []struct {
		name string
		n    servicemap.ServicePortName
		want string
	}{
		{"named port", servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "svc"}, Port: "p", Protocol: "TCP"}, "ns/svc:p"},
		{"unnamed port", servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "svc"}, Protocol: "UDP"}, "ns/svc"},
	}
	for _, tt := range tests {
		if got := PortName(tt.n); got != tt.want {
			t.Errorf("%s: PortName = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestClusterIPAndAddrsOf(t *testing.T) {
	v4, v6, mapped := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::ffff:10.0.0.2")
	tests := []struct {
		name      string
		as        []netip.Addr
		v6        bool
		clusterIP netip.Addr // zero: none
		addrs     []netip.Addr
	}{
		{name: "none", v6: false},
		{name: "IPv4 of dual-stack", as: []netip.Addr{v4, v6}, clusterIP: v4, addrs: []netip.Addr{v4}},
		{name: "IPv6 of dual-stack", as: []netip.Addr{v4, v6}, v6: true, clusterIP: v6, addrs: []netip.Addr{v6}},
		{name: "mapped IPv4 is IPv4, unmapped", as: []netip.Addr{mapped}, clusterIP: mapped.Unmap(), addrs: []netip.Addr{mapped}},
		{name: "invalid skipped", as: []netip.Addr{{}, v6}, v6: true, clusterIP: v6, addrs: []netip.Addr{v6}},
		{name: "other family only", as: []netip.Addr{v6}},
	}
	for _, tt := range tests {
		got, ok := ClusterIP(&servicemap.ServicePort{ClusterIPs: tt.as}, tt.v6)
		if got != tt.clusterIP || ok != tt.clusterIP.IsValid() {
			t.Errorf("%s: ClusterIP = %v, %v, want %v", tt.name, got, ok, tt.clusterIP)
		}
		if got := AddrsOf(tt.as, tt.v6); !slices.Equal(got, tt.addrs) {
			t.Errorf("%s: AddrsOf = %v, want %v", tt.name, got, tt.addrs)
		}
	}
}
