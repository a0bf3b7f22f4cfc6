package rules

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
)

// TestChainNamesMatchKubeProxy checks names against the ones kube-proxy
// v1.36's own iptables tests expect (pkg/proxy/iptables), so a node's
// chains keep their names when kproxy replaces kube-proxy.
func TestChainNamesMatchKubeProxy(t *testing.T) {
	tests := []struct {
		ns, name, port string
		endpoint       string
		svc, sep       string
	}{
		{"ns1", "svc1", "p80", "10.180.0.1:80", "KUBE-SVC-XPGD46QRK7WJZT7O", "KUBE-SEP-SXIVWICOYRO3J4NJ"},
		{"ns2", "svc2", "p80", "10.180.0.2:80", "KUBE-SVC-GNZBNJ2PO5MGZ6GT", "KUBE-SEP-RS4RBKLTHTF2IUXJ"},
		{"ns3", "svc3", "p80", "10.180.0.3:80", "KUBE-SVC-X27LE4BHSL4DOUIK", "KUBE-SEP-OYPFS5VJICHGATKP"},
		{"ns4", "svc4", "p80", "10.180.0.5:80", "KUBE-SVC-4SW47YFZTEDKD3PK", "KUBE-SEP-C6EBXVWJJZMIWKLZ"},
		{"ns5", "svc5", "p80", "10.180.0.3:80", "KUBE-SVC-NUKIZ6OKUXPJNT4C", "KUBE-SEP-I77PXRDZVX7PMWMN"},
	}
	for _, tt := range tests {
		n := testkit.PortName(tt.ns, tt.name, tt.port, v1.ProtocolTCP)
		if got := ServiceChain(n); got != tt.svc {
			t.Errorf("ServiceChain(%s) = %s, want %s", n, got, tt.svc)
		}
		if got := EndpointChain(n, netip.MustParseAddrPort(tt.endpoint)); got != tt.sep {
			t.Errorf("EndpointChain(%s, %s) = %s, want %s", n, tt.endpoint, got, tt.sep)
		}
	}
	// The other per-port chains share the service's hash (kube-proxy's
	// KUBE-FW-NUKIZ6OKUXPJNT4C and KUBE-EXT-GNZBNJ2PO5MGZ6GT).
	if got := FirewallChain(testkit.PortName("ns5", "svc5", "p80", v1.ProtocolTCP)); got != "KUBE-FW-NUKIZ6OKUXPJNT4C" {
		t.Errorf("FirewallChain = %s", got)
	}
	if got := ExternalChain(testkit.PortName("ns2", "svc2", "p80", v1.ProtocolTCP)); got != "KUBE-EXT-GNZBNJ2PO5MGZ6GT" {
		t.Errorf("ExternalChain = %s", got)
	}
	if got := LocalServiceChain(testkit.PortName("ns2", "svc2", "p80", v1.ProtocolTCP)); got != "KUBE-SVL-GNZBNJ2PO5MGZ6GT" {
		t.Errorf("LocalServiceChain = %s", got)
	}
}

// TestChainNameInputs checks what goes into the hash: the protocol (in
// lower case), the port name (absent for an unnamed port), and the
// endpoint as "ip:port" or "[ip]:port".
func TestChainNameInputs(t *testing.T) {
	tcp, udp := testkit.PortName("ns", "svc", "p", v1.ProtocolTCP), testkit.PortName("ns", "svc", "p", v1.ProtocolUDP)
	if ServiceChain(tcp) == ServiceChain(udp) {
		t.Errorf("TCP and UDP ports of one name share the chain %s", ServiceChain(tcp))
	}
	tests := []struct {
		name       string
		got, input string
	}{
		{"port name", kernelmode.PortName(tcp), "ns/svc:p"},
		{"unnamed port", kernelmode.PortName(testkit.PortName("ns", "svc", "", v1.ProtocolTCP)), "ns/svc"},
		{"protocol", lowerProtocol(testkit.PortName("ns", "svc", "", v1.ProtocolSCTP)), "sctp"},
		{"IPv4 endpoint", string(kernelmode.AppendEndpoint(nil, netip.MustParseAddrPort("10.0.0.1:80"))), "10.0.0.1:80"},
		{"IPv4-mapped endpoint", string(kernelmode.AppendEndpoint(nil, netip.MustParseAddrPort("[::ffff:10.0.0.1]:80"))), "10.0.0.1:80"},
		{"IPv6 endpoint", string(kernelmode.AppendEndpoint(nil, netip.MustParseAddrPort("[fd00::1]:80"))), "[fd00::1]:80"},
	}
	for _, tt := range tests {
		if tt.got != tt.input {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.input)
		}
	}
	if got := len(EndpointChain(tcp, netip.MustParseAddrPort("[fd00::1]:80"))); got > 28 {
		t.Errorf("endpoint chain name is %d characters; iptables allows 28", got)
	}
}

func TestIsPortChain(t *testing.T) {
	tests := []struct {
		chain string
		want  bool
	}{
		{"KUBE-SVC-XPGD46QRK7WJZT7O", true},
		{"KUBE-SVL-XPGD46QRK7WJZT7O", true},
		{"KUBE-EXT-XPGD46QRK7WJZT7O", true},
		{"KUBE-FW-XPGD46QRK7WJZT7O", true},
		{"KUBE-SEP-SXIVWICOYRO3J4NJ", true},
		{"KUBE-SERVICES", false},
		{"KUBE-FIREWALL", false},
		{"KUBE-FORWARD", false},
		{"KUBE-MARK-MASQ", false},
	}
	for _, tt := range tests {
		if got := IsPortChain(tt.chain); got != tt.want {
			t.Errorf("IsPortChain(%s) = %v, want %v", tt.chain, got, tt.want)
		}
	}
}
