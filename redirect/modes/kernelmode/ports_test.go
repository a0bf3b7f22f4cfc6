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

func TestAppendEndpoint(t *testing.T) {
	tests := []struct{ ep, want string }{
		{"10.0.0.1:80", "10.0.0.1:80"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1:80"},
		{"[fd00::1]:8080", "[fd00::1]:8080"},
	}
	for _, tt := range tests {
		if got := string(AppendEndpoint([]byte("x "), netip.MustParseAddrPort(tt.ep))); got != "x "+tt.want {
			t.Errorf("AppendEndpoint(%s) = %q, want %q", tt.ep, got, "x "+tt.want)
		}
	}
}

func TestSortedAsText(t *testing.T) {
	ep := func(s string) servicemap.Endpoint {
		ap := netip.MustParseAddrPort(s)
		return servicemap.Endpoint{Addr: ap.Addr(), Port: ap.Port()}
	}
	tests := []struct {
		name   string
		in     []servicemap.Endpoint
		want   []string
		shared bool // the input comes back, not a copy
	}{
		{name: "empty", shared: true},
		{name: "sorted already", in: []servicemap.Endpoint{ep("10.0.0.1:80"), ep("10.0.0.2:80")}, want: []string{"10.0.0.1:80", "10.0.0.2:80"}, shared: true},
		// As text "10.0.0.10:" sorts before "10.0.0.1:" (':' follows the
		// digits) and "10.0.0.9", and port "100" before "80".
		{name: "text order", in: []servicemap.Endpoint{ep("10.0.0.9:80"), ep("10.0.0.10:80"), ep("10.0.0.1:80"), ep("10.0.0.1:100")},
			want: []string{"10.0.0.10:80", "10.0.0.1:100", "10.0.0.1:80", "10.0.0.9:80"}},
		{name: "IPv6", in: []servicemap.Endpoint{ep("[fd00::2]:80"), ep("[fd00::10]:80")}, want: []string{"[fd00::10]:80", "[fd00::2]:80"}},
	}
	for _, tt := range tests {
		orig := slices.Clone(tt.in)
		got := SortedAsText(tt.in)
		var texts []string
		for _, e := range got {
			texts = append(texts, e.String())
		}
		if !slices.Equal(texts, tt.want) {
			t.Errorf("%s: SortedAsText = %v, want %v", tt.name, texts, tt.want)
		}
		if !slices.EqualFunc(tt.in, orig, func(a, b servicemap.Endpoint) bool { return a.AddrPort() == b.AddrPort() }) {
			t.Errorf("%s: the input changed to %v", tt.name, tt.in)
		}
		if shared := len(got) > 0 && &got[0] == &tt.in[0]; shared != (tt.shared && len(got) > 0) {
			t.Errorf("%s: result shares the input: %v, want %v", tt.name, shared, tt.shared)
		}
	}
}
