package portal

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestNoEndpointsRefusedOnKernel programs portals for a service without
// endpoints next to served ones, all sharing the same two proxy ports (a TCP
// server and a UDP echo standing in for the relays), and checks, from the
// client host (PREROUTING → REDIRECT → INPUT) and from the node itself
// (OUTPUT → DNAT → lo → INPUT), that a TCP SYN to the empty service is
// answered by a reset (ECONNREFUSED) and a UDP datagram by an ICMP port
// unreachable (ECONNREFUSED on the connected socket), while the served
// services on the same proxy ports still answer. The node's IP forwarding
// is off: the refusal must not rely on it.
func TestNoEndpointsRefusedOnKernel(t *testing.T) {
	for _, be := range kernel.Backends() {
		t.Run(string(be), func(t *testing.T) {
			if onKernel(t, be) {
				return
			}
			topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 1})
			lab.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=0")
			_, _, proxy := standInRelays(t)

			nodePort := func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }
			empty := service("default", "empty", func(s *v1.Service) { clusterIPs("198.18.0.30")(s); nodePort(s) },
				catalogue.Port("http", v1.ProtocolTCP, 80, 30090), catalogue.Port("dns", v1.ProtocolUDP, 53, 30053))
			web := service("default", "web", func(s *v1.Service) { clusterIPs("198.18.0.31")(s); nodePort(s) },
				catalogue.Port("http", v1.ProtocolTCP, 80, 30080), catalogue.Port("dns", v1.ProtocolUDP, 53, 30054))
			local := service("default", "local", func(s *v1.Service) {
				clusterIPs("198.18.0.32")(s)
				nodePort(s)
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}, catalogue.Port("http", v1.ProtocolTCP, 80, 30091))
			states := map[string]ClassEndpoints{
				"empty": {Internal: NoEndpoints, External: NoEndpoints},
				"local": {External: NoLocalEndpoints},
			}
			portals := PortalsFrom(snapshotOf(t, empty, web, local), proxy)
			for i := range portals {
				portals[i].Endpoints = states[portals[i].Port.Name.Name]
			}
			node := Node{HostIPs: []netip.Addr{topo.Node.IPv4}, LocalAddresses: []netip.Addr{topo.Node.IPv4, topo.Node.PodIPv4}}
			rs, err := Build(ipfamily.IPv4, node, portals)
			if err != nil {
				t.Fatal(err)
			}
			a, err := NewApplier(Config{Family: ipfamily.IPv4, Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Apply(context.Background(), rs, true); err != nil {
				t.Fatalf("Apply: %v", err)
			}

			hosts := []struct {
				name string
				dial lab.Dialer
			}{
				{"client host", topo.Client},
				{"node itself", &net.Dialer{}},
			}
			nodeAddr := func(port int) string { return netip.AddrPortFrom(topo.Node.IPv4, uint16(port)).String() }
			for _, h := range hosts {
				for _, to := range []string{"198.18.0.30:80", nodeAddr(30090)} {
					if got, err := lab.TCPGreeting(h.dial, to); !errors.Is(err, syscall.ECONNREFUSED) {
						t.Errorf("%s: TCP to %s (no endpoints): %q, %v; want connection refused", h.name, to, got, err)
					}
				}
				for _, to := range []string{"198.18.0.30:53", nodeAddr(30053)} {
					if got, err := lab.UDPAsk(h.dial, to, "ping"); !errors.Is(err, syscall.ECONNREFUSED) {
						t.Errorf("%s: UDP to %s (no endpoints): %q, %v; want connection refused (ICMP port unreachable)", h.name, to, got, err)
					}
				}
				// The same proxy ports still serve the services that have
				// endpoints, and the cluster IP of the Local-policy one.
				for _, to := range []string{"198.18.0.31:80", nodeAddr(30080), "198.18.0.32:80"} {
					if got, err := lab.TCPGreeting(h.dial, to); err != nil || got != "hello" {
						t.Errorf("%s: TCP to %s (served): %q, %v; want the server's hello", h.name, to, got, err)
					}
				}
				for _, to := range []string{"198.18.0.31:53", nodeAddr(30054)} {
					if got, err := lab.UDPAsk(h.dial, to, "ping"); err != nil || got != "ping" {
						t.Errorf("%s: UDP to %s (served): %q, %v; want the echo", h.name, to, got, err)
					}
				}
			}

			// externalTrafficPolicy: Local with no local endpoint: the
			// NodePort's SYN is dropped, neither refused nor relayed.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			c, err := topo.Client.DialContext(ctx, "tcp4", nodeAddr(30091))
			cancel()
			if err == nil {
				c.Close()
				t.Errorf("TCP to the Local-policy NodePort without local endpoints connected; want it dropped")
			} else if errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("TCP to the Local-policy NodePort without local endpoints was refused; want it dropped")
			}
			if n := ruleHits(t, be, "default/local:http has no local endpoints"); n == 0 {
				t.Errorf("the DROP rule of default/local counted no packet")
			}
			if n := ruleHits(t, be, "default/empty:http has no endpoints"); n == 0 {
				t.Errorf("the REJECT rules of default/empty:http counted no packet")
			}
		})
	}
}

// ruleHits sums the packet counters of the filter rules whose comment is
// comment.
func ruleHits(t *testing.T, be kernel.Backend, comment string) int {
	t.Helper()
	total := 0
	for _, line := range strings.Split(lab.Run(t, be.SaveCommand(ipfamily.IPv4), "-c", "-t", "filter"), "\n") {
		if !strings.Contains(line, `"`+comment+`"`) || !strings.HasPrefix(line, "[") {
			continue
		}
		counters, _, _ := strings.Cut(strings.TrimPrefix(line, "["), "]")
		pkts, _, _ := strings.Cut(counters, ":")
		n, err := strconv.Atoi(pkts)
		if err != nil {
			t.Fatalf("parsing the counters of %q: %v", line, err)
		}
		total += n
	}
	return total
}
