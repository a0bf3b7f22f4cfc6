package rules

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/servicemap"
)

// TestNames checks the object names against kube-proxy v1.36's for the
// same ports and endpoints (the expected values are what its own naming
// gives), including an IPv6 endpoint and names cut at nft's length limit.
// Endpoint addresses are written as Go prints them, as kube-proxy hashes
// them (its unit tests also feed it uncanonical text, whose names a real
// EndpointSlice never produces).
func TestNames(t *testing.T) {
	name := func(ns, svc, port string, proto v1.Protocol) servicemap.ServicePortName {
		return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: svc}, Port: port, Protocol: proto}
	}
	long := name("very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx",
		"very-long-service-name-why-would-you-even-do-this-i-mean-really",
		"port-443-providing-the-hypertext-transmission-protocol-with-tls", v1.ProtocolSCTP)
	for _, tc := range []struct {
		name     string
		port     servicemap.ServicePortName
		endpoint string // "" for the port's own base
		want     string
	}{
		{"port", name("ns1", "svc1", "p80", v1.ProtocolTCP), "", "ULMVA6XW-ns1/svc1/tcp/p80"},
		{"endpoint", name("testing", "service", "http", v1.ProtocolTCP), "10.180.0.2:80", "5S6H3H22-testing/service/tcp/http__10.180.0.2/80"},
		{"longest uncut", long, "[1234:5678:9abc:def0::abc:1234]:443",
			"5YS7AFEA-very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx/very-long-service-name-why-would-you-even-do-this-i-mean-really/sctp/port-443-providing-the-hypertext-transmission-protocol-with-tls__1234.5678.9abc.def0..abc.1234/443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proto, err := servicemap.ProtocolName(tc.port.Protocol)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			if tc.endpoint == "" {
				got = portBase(tc.port, proto)
			} else {
				got = endpointBase(tc.port, proto, netip.MustParseAddrPort(tc.endpoint))
			}
			if got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	// kube-proxy hashes endpoints as net.IP prints them, which leaves a
	// single zero group uncompressed (RFC 5952), as netip does: a name one
	// character longer than the longest uncut one is cut to 240 with "...",
	// and two addresses differing only past the cut still get two names.
	a := endpointBase(long, "sctp", netip.MustParseAddrPort("[1234:5678:9abc:def0:0:abcd:1234:5678]:443"))
	b := endpointBase(long, "sctp", netip.MustParseAddrPort("[1234:5678:9abc:def0:0:abcd:1234:8765]:443"))
	if len(a) != baseLengthMax || a[len(a)-3:] != "..." || a == b || a[9:] != b[9:] {
		t.Errorf("cut names:\n%q\n%q", a, b)
	}
}

func TestPortOf(t *testing.T) {
	long := strings.Repeat("n", 250)
	tests := []struct {
		name, want string
		ok         bool
	}{
		{"service-ULMVA6XW-ns1/svc1/tcp/p80", "ns1/svc1/tcp/p80", true},
		{"local-ULMVA6XW-ns1/svc1/tcp/p80", "ns1/svc1/tcp/p80", true},
		{"endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80", "ns1/svc1/tcp/p80", true},
		{"affinity-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80", "ns1/svc1/tcp/p80", true},
		{"endpoint-ABCDEFGH-ns1/svc1/udp/__fd00..1/53", "ns1/svc1/udp/", true},
		{"external-ULMVA6XW-ns1/svc1/tcp/p80", "ns1/svc1/tcp/p80", true},
		{"firewall-ULMVA6XW-ns1/svc1/tcp/p80", "ns1/svc1/tcp/p80", true},
		{"services", "", false},
		{"reject-chain", "", false},
		{ClusterPolicyPrefix + hashAndTruncate("ns/"+long+"/tcp/http"), "", false},
		{"affinity-" + hashAndTruncate("ns/"+long+"/tcp/http__198.19.0.1/80"), "", false},
	}
	for _, tt := range tests {
		got, ok := PortOf(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("PortOf(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
