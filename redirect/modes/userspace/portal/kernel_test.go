package portal

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// from dials from the test's namespace (the node), from source address ip
// unless it is empty.
func from(ip string) lab.Dialer {
	if ip == "" {
		return &net.Dialer{}
	}
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
}

// onKernel starts a subtest that programs be: it re-runs the subtest in a
// fresh network namespace (true in the outer process, which must return)
// and skips it where be's tools are not installed.
func onKernel(t *testing.T, be kernel.Backend) (ranOutside bool) {
	t.Helper()
	if lab.InFreshNetns(t) {
		return true
	}
	if _, err := exec.LookPath(be.RestoreCommand(ipfamily.IPv4)); err != nil {
		t.Skipf("%s not installed", be.RestoreCommand(ipfamily.IPv4))
	}
	return false
}

// proxyPortFunc is how PortalsFrom learns each service port's proxy ports.
type proxyPortFunc = func(servicemap.ServicePortName) (ProxyPorts, bool)

// standInRelays starts, on every address of the namespace, a TCP server
// saying "hello" and a UDP echo standing in for the relays, and returns
// their ports and the lookup that sends every TCP service port to the first
// and every UDP one to the second, for both traffic classes.
func standInRelays(t *testing.T) (tcpPort, udpPort uint16, proxy proxyPortFunc) {
	t.Helper()
	tcpPort, udpPort = lab.ServeGreeting(t, "0.0.0.0:0", "hello").Port(), lab.ServeUDPEcho(t, "0.0.0.0:0").Port()
	return tcpPort, udpPort, func(n servicemap.ServicePortName) (ProxyPorts, bool) {
		if n.Protocol == v1.ProtocolUDP {
			return ProxyPorts{Internal: udpPort, External: udpPort}, true
		}
		return ProxyPorts{Internal: tcpPort, External: tcpPort}, true
	}
}

func TestPortalsOnKernel(t *testing.T) {
	for _, be := range kernel.Backends() {
		t.Run(string(be), func(t *testing.T) {
			if onKernel(t, be) {
				return
			}
			lab.AddNodeLink(t, "198.19.0.1/24", "198.19.0.2/24")
			tcpPort, udpPort, proxy := standInRelays(t)

			web := service("default", "web", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerSourceRanges = []string{"198.19.0.2/32"}
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.18.9.9"}}
			}, catalogue.Port("http", v1.ProtocolTCP, 80, 30080))
			dns := service("kube-system", "dns", clusterIPs("198.18.0.53"), catalogue.Port("dns", v1.ProtocolUDP, 53, 0))
			node := Node{HostIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1")}}
			build := func(svcs ...*v1.Service) *Ruleset {
				rs, err := Build(ipfamily.IPv4, node, PortalsFrom(snapshotOf(t, svcs...), proxy))
				if err != nil {
					t.Fatal(err)
				}
				return rs
			}
			a, err := NewApplier(Config{Family: ipfamily.IPv4, Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			rs := build(web, dns)
			if err := a.Apply(context.Background(), rs, true); err != nil {
				t.Fatalf("Apply: %v", err)
			}

			// iptables-save prints exactly the rules Build wrote, chain by chain.
			checkSavedRules(t, be, rs)

			// Through the portals the servers answer, from the address used.
			for _, to := range []string{"198.18.0.10:80", "198.19.0.1:30080", "198.19.0.2:30080"} {
				if got, err := lab.TCPGreeting(from(""), to); err != nil || got != "hello" {
					t.Errorf("TCP to %s: %q, %v; want the server's hello", to, got, err)
				}
			}
			if got, err := lab.UDPAsk(from(""), "198.18.0.53:53", "ping"); err != nil || got != "ping" {
				t.Errorf("UDP to the cluster IP: %q, %v; want the echo", got, err)
			}
			// loadBalancerSourceRanges: only 198.19.0.2 may use the LB IP.
			if got, err := lab.TCPGreeting(from("198.19.0.2"), "198.18.9.9:80"); err != nil || got != "hello" {
				t.Errorf("TCP to the LB IP from an allowed source: %q, %v", got, err)
			}
			if _, err := lab.TCPGreeting(from("198.19.0.1"), "198.18.9.9:80"); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("TCP to the LB IP from outside the source ranges: %v, want connection refused", err)
			}

			// Straight to a proxy port: refused, not relayed.
			if _, err := lab.TCPGreeting(from(""), netip.AddrPortFrom(netip.MustParseAddr("198.19.0.1"), tcpPort).String()); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("direct TCP connection to the proxy port: %v, want connection refused", err)
			}
			if _, err := lab.UDPAsk(from(""), netip.AddrPortFrom(netip.MustParseAddr("198.19.0.1"), udpPort).String(), "ping"); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("direct UDP datagram to the proxy port: %v, want connection refused", err)
			}

			// The web service goes away: its rules with it, dns stays.
			if err := a.Apply(context.Background(), build(dns), false); err != nil {
				t.Fatalf("second Apply: %v", err)
			}
			all := lab.Run(t, be.SaveCommand(ipfamily.IPv4))
			if strings.Contains(all, "default/web") {
				t.Errorf("rules of the removed service remain:\n%s", all)
			}
			if !strings.Contains(all, "kube-system/dns:dns") {
				t.Errorf("rules of the remaining service are gone:\n%s", all)
			}
			// A full sync checks the jumps again, against iptables-save's
			// text: each is found in place, none added twice.
			if err := a.Apply(context.Background(), build(dns), true); err != nil {
				t.Fatalf("full Apply: %v", err)
			}
			all = lab.Run(t, be.SaveCommand(ipfamily.IPv4))
			for _, j := range Jumps() {
				rule := "-A " + j.Chain + " " + restore.JoinRule(j.Args)
				if n := strings.Count(all, rule+"\n"); n != 1 {
					t.Errorf("%d of %q after three syncs, want 1:\n%s", n, rule, all)
				}
			}
		})
	}
}

func TestApplyReportsTheKernelsComplaint(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	a, err := NewApplier(Config{Family: ipfamily.IPv4, Backend: kernel.NFT})
	if err != nil {
		t.Fatal(err)
	}
	rs := &Ruleset{Family: ipfamily.IPv4, NAT: Table{Name: TableNAT, Chains: natChains(), Rules: []Rule{
		{Chain: ChainPortalsHost, Args: []string{"-p", "tcp", "-j", "ACCEPT"}},
		{Chain: ChainPortalsHost, Args: []string{"-p", "tcp", "-j", "KUBE-NOWHERE"}},
	}}, Filter: Table{Name: TableFilter, Chains: filterChains()}}
	err = a.Apply(context.Background(), rs, true)
	var re *restore.Error
	if !errors.As(err, &re) {
		t.Fatalf("Apply = %v, want a *restore.Error", err)
	}
	if want := "-A KUBE-PORTALS-HOST -p tcp -j KUBE-NOWHERE"; re.Rule != want {
		t.Errorf("the error names %q, want %q: %v", re.Rule, want, err)
	}
}

func TestClaimsOnKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	squatter, err := net.Listen("tcp4", "0.0.0.0:30080")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	web := servicemap.ServicePortName{Port: "http", Protocol: v1.ProtocolTCP}
	web.Namespace, web.Name = "default", "web"
	api, dns := web, web
	api.Name = "api"
	dns.Name, dns.Protocol = "dns", v1.ProtocolUDP
	c := NewClaimer(nil)
	defer c.Close()
	err = c.Sync([]Claim{
		{Family: ipfamily.IPv4, Protocol: v1.ProtocolTCP, Port: 30080, Owner: web},
		{Family: ipfamily.IPv4, Protocol: v1.ProtocolTCP, Port: 30081, Owner: api},
		{Family: ipfamily.IPv6, Protocol: v1.ProtocolTCP, Port: 30081, Owner: api},
		{Family: ipfamily.IPv4, Protocol: v1.ProtocolUDP, Port: 30053, Owner: dns},
	})
	if err == nil || !strings.Contains(err.Error(), "default/web:http/TCP") || !strings.Contains(err.Error(), "0.0.0.0:30080") {
		t.Fatalf("Sync = %v, want an error naming default/web and port 30080", err)
	}
	if n := len(c.Held()); n != 3 {
		t.Errorf("%d claims held, want the 3 that did not conflict: %v", n, c.Held())
	}
	for _, probe := range []struct{ network, addr string }{{"tcp4", "0.0.0.0:30081"}, {"tcp6", "[::]:30081"}, {"udp4", "0.0.0.0:30053"}} {
		if err := tryBind(probe.network, probe.addr); !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("binding %s %s while claimed: %v, want address in use", probe.network, probe.addr, err)
		}
	}
	// The api service goes away: its ports are free again.
	if err := c.Sync([]Claim{{Family: ipfamily.IPv4, Protocol: v1.ProtocolUDP, Port: 30053, Owner: dns}}); err != nil {
		t.Fatal(err)
	}
	if err := tryBind("tcp4", "0.0.0.0:30081"); err != nil {
		t.Errorf("port 30081 not released: %v", err)
	}
	if err := tryBind("udp4", "0.0.0.0:30053"); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("the kept UDP claim was dropped: %v", err)
	}
}

func tryBind(network, addr string) error {
	if strings.HasPrefix(network, "udp") {
		pc, err := net.ListenPacket(network, addr)
		if err == nil {
			pc.Close()
		}
		return err
	}
	ln, err := net.Listen(network, addr)
	if err == nil {
		ln.Close()
	}
	return err
}
