package portal

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestSocketCheckOnKernel: with Node.CheckSocket, redirected TCP and UDP
// reach only IP_TRANSPARENT sockets, as the relays' are. Once a relay's
// socket is replaced by an ordinary one on the same port (a crash, then
// anyone binding the freed port), a new connection is refused and the next
// datagram of a UDP flow that conntrack still redirects reaches nobody.
func TestSocketCheckOnKernel(t *testing.T) {
	for _, be := range kernel.Backends() {
		t.Run(string(be), func(t *testing.T) {
			if onKernel(t, be) {
				return
			}
			lab.AddNodeLink(t, "198.19.0.1/24", "198.19.0.2/24")
			a, err := NewApplier(Config{Family: ipfamily.IPv4, Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.SupportsSocketMatch(context.Background()); err != nil {
				t.Fatalf("this kernel has xt_socket, yet: %v", err)
			}
			relayTCP := listenTCP(t, 0, true, "relay")
			relayUDP := listenUDP(t, 0, true, "relay ")
			tcpPort, udpPort := uint16(relayTCP.Addr().(*net.TCPAddr).Port), uint16(relayUDP.LocalAddr().(*net.UDPAddr).Port)

			web := service("default", "web", clusterIPs("198.18.0.10"), catalogue.Port("http", v1.ProtocolTCP, 80, 0))
			dns := service("kube-system", "dns", clusterIPs("198.18.0.53"), catalogue.Port("dns", v1.ProtocolUDP, 53, 0))
			proxy := func(n servicemap.ServicePortName) (ProxyPorts, bool) {
				if n.Protocol == v1.ProtocolUDP {
					return ProxyPorts{Internal: udpPort, External: udpPort}, true
				}
				return ProxyPorts{Internal: tcpPort, External: tcpPort}, true
			}
			node := Node{HostIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1")}, CheckSocket: true}
			rs, err := Build(ipfamily.IPv4, node, PortalsFrom(snapshotOf(t, web, dns), proxy))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Apply(context.Background(), rs, true); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			checkSavedRules(t, be, rs)

			if got, err := lab.TCPGreeting(from(""), "198.18.0.10:80"); err != nil || got != "relay" {
				t.Fatalf("TCP to the cluster IP: %q, %v; want the relay", got, err)
			}
			flow, err := net.Dial("udp4", "198.18.0.53:53")
			if err != nil {
				t.Fatal(err)
			}
			defer flow.Close()
			if got, err := lab.UDPExchange(flow, "ping", time.Second); err != nil || got != "relay ping" {
				t.Fatalf("UDP to the cluster IP: %q, %v; want the relay's echo", got, err)
			}
			if _, err := lab.TCPGreeting(from(""), netip.AddrPortFrom(netip.MustParseAddr("198.19.0.1"), tcpPort).String()); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("direct TCP connection to the proxy port: %v, want connection refused", err)
			}

			// The relays go; ordinary sockets take their ports.
			relayTCP.Close()
			relayUDP.Close()
			listenTCP(t, tcpPort, false, "taken over")
			listenUDP(t, udpPort, false, "taken over ")
			if got, err := lab.TCPGreeting(from(""), "198.18.0.10:80"); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("TCP to the cluster IP once an ordinary socket holds the proxy port: %q, %v; want connection refused", got, err)
			}
			if got, err := lab.UDPExchange(flow, "ping again", time.Second); err == nil {
				t.Errorf("the UDP flow's next datagram reached the ordinary socket on the proxy port: %q", got)
			}
			if got, err := lab.UDPAsk(from(""), "198.18.0.53:53", "new flow"); err == nil {
				t.Errorf("a new UDP flow reached the ordinary socket on the proxy port: %q", got)
			}
		})
	}
}

// checkSavedRules fails t unless iptables-save prints exactly the rules rs
// holds, chain by chain, and the jumps into them.
func checkSavedRules(t *testing.T, be kernel.Backend, rs *Ruleset) {
	t.Helper()
	for _, tbl := range rs.Tables() {
		save := lab.Run(t, be.SaveCommand(ipfamily.IPv4), "-t", tbl.Name)
		var got, want []string
		for _, line := range strings.Split(save, "\n") {
			for _, c := range tbl.Chains {
				if strings.HasPrefix(line, "-A "+c+" ") {
					got = append(got, line)
				}
			}
		}
		for _, r := range tbl.Rules {
			want = append(want, r.String())
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s table: iptables-save shows\n%s\nwant\n%s", tbl.Name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for _, j := range Jumps() {
			if j.Table == tbl.Name && !strings.Contains(save, j.Args[len(j.Args)-1]) {
				t.Errorf("no jump to %s in\n%s", j.Args[len(j.Args)-1], save)
			}
		}
	}
}

// transparentControl sets IP_TRANSPARENT on a socket before it binds.
func transparentControl(_, _ string, c syscall.RawConn) error {
	var sockErr error
	if err := c.Control(func(fd uintptr) { sockErr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1) }); err != nil {
		return err
	}
	return sockErr
}

// listenTCP listens on every address at port (0: any), IP_TRANSPARENT if
// transparent, and writes greeting to every connection until the test ends.
func listenTCP(t *testing.T, port uint16, transparent bool, greeting string) net.Listener {
	t.Helper()
	var lc net.ListenConfig
	if transparent {
		lc.Control = transparentControl
	}
	ln, err := lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(netip.IPv4Unspecified(), port).String())
	if err != nil {
		t.Fatalf("listening on TCP port %d: %v", port, err)
	}
	t.Cleanup(func() { ln.Close() })
	go lab.ServeGreetingOn(ln, greeting)
	return ln
}

// listenUDP binds every address at port (0: any), IP_TRANSPARENT if
// transparent, and answers every datagram with prefix and the datagram
// until the test ends.
func listenUDP(t *testing.T, port uint16, transparent bool, prefix string) net.PacketConn {
	t.Helper()
	var lc net.ListenConfig
	if transparent {
		lc.Control = transparentControl
	}
	pc, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(netip.IPv4Unspecified(), port).String())
	if err != nil {
		t.Fatalf("binding UDP port %d: %v", port, err)
	}
	t.Cleanup(func() { pc.Close() })
	go lab.ServeUDPEchoOn(pc.(*net.UDPConn), prefix)
	return pc
}
