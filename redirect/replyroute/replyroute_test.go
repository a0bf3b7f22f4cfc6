package replyroute_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/redirect/replyroute"
)

const serverPort = 8080

// serveTCPPeer answers each connection on h with the peer address it saw.
func serveTCPPeer(t *testing.T, h *lab.Host, addr netip.Addr) {
	ln, err := h.Listen("tcp", netip.AddrPortFrom(addr, serverPort).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\n", c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
			c.Close()
		}
	}()
}

// serveUDPPeer answers each datagram on h with its source address.
func serveUDPPeer(t *testing.T, h *lab.Host, addr netip.Addr) {
	pc, err := h.ListenPacket("udp", netip.AddrPortFrom(addr, serverPort).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(from.(*net.UDPAddr).AddrPort().Addr().Unmap().String()+"\n"), from)
		}
	}()
}

// ask writes a byte on conn and reads the server's one-line answer.
func ask(conn net.Conn) (string, error) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("?")); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if n == 0 && err != nil && err != io.EOF {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// dialKept opens a transparent socket for client through k and connects it
// to ep, blocking.
func dialKept(k *keepsource.Keeper, typ, proto int, client netip.Addr, ep netip.AddrPort) (net.Conn, keepsource.Flow, error) {
	fd, flow, err := k.Socket(typ, proto, client, ep)
	if err != nil {
		return nil, flow, err
	}
	var sa unix.Sockaddr
	if ep.Addr().Is4() {
		sa = &unix.SockaddrInet4{Addr: ep.Addr().As4(), Port: int(ep.Port())}
	} else {
		sa = &unix.SockaddrInet6{Addr: ep.Addr().As16(), Port: int(ep.Port())}
	}
	if err := unix.SetNonblock(fd, false); err == nil {
		err = unix.Connect(fd, sa)
	}
	if err != nil {
		unix.Close(fd)
		return nil, flow, fmt.Errorf("connecting to %v: %w", ep, err)
	}
	f := os.NewFile(uintptr(fd), "kept")
	defer f.Close()
	conn, err := net.FileConn(f)
	return conn, flow, err
}

// kproxyRules counts the policy rules of kproxy's protocol.
func kproxyRules(t *testing.T) int {
	t.Helper()
	n := 0
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := netlink.RuleListFiltered(fam, &netlink.Rule{Protocol: replyroute.Protocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			if r.Protocol == replyroute.Protocol {
				n++
			}
		}
	}
	return n
}

// A transparent dial from the node reaches a backend with the client's
// address, in both families, over TCP and UDP; the client's own direct
// connections to the backend keep working meanwhile; and the rules go when
// the flows do, and with Clean.
func TestKernelKeepsClientAddress(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 1, DualStack: true})
	backend, client := topo.Backends[0], topo.Client
	steer := &replyroute.Netlink{}
	t.Cleanup(steer.Close)
	k := keepsource.New(steer)
	k.SetView(&keepsource.View{Endpoints: map[netip.Addr]bool{backend.IPv4: true, backend.IPv6: true}})

	for _, fam := range []struct {
		name           string
		client, server netip.Addr
	}{
		{"IPv4", client.IPv4, backend.IPv4},
		{"IPv6", client.IPv6, backend.IPv6},
	} {
		serveTCPPeer(t, backend, fam.server)
		serveUDPPeer(t, backend, fam.server)
		ep := netip.AddrPortFrom(fam.server, serverPort)
		for _, proto := range []struct {
			name        string
			typ, number int
			network     string
		}{
			{"TCP", unix.SOCK_STREAM, unix.IPPROTO_TCP, "tcp"},
			{"UDP", unix.SOCK_DGRAM, unix.IPPROTO_UDP, "udp"},
		} {
			t.Run(fam.name+"/"+proto.name, func(t *testing.T) {
				if !k.Keeps(fam.client, fam.server) {
					t.Fatalf("Keeps(%v, %v) = false, want true", fam.client, fam.server)
				}
				conn, flow, err := dialKept(k, proto.typ, proto.number, fam.client, ep)
				if err != nil {
					t.Fatal(err)
				}
				if got := kproxyRules(t); got != 1 {
					t.Errorf("%d kproxy rules while one flow is open, want 1", got)
				}
				// A direct connection of the client to the backend, while
				// the rule is in: its replies must still reach the client.
				direct, err := client.Dial(proto.network, ep.String())
				if err != nil {
					t.Fatal(err)
				}
				if got, err := ask(direct); err != nil || got != fam.client.String() {
					t.Errorf("the client's direct %s connection: answer %q, %v; want %s", proto.name, got, err, fam.client)
				}
				got, err := ask(conn)
				if err != nil || got != fam.client.String() {
					t.Errorf("backend saw %q (%v) through the transparent dial, want the client's %s", got, err, fam.client)
				}
				if err := k.Release(flow); err != nil {
					t.Error(err)
				}
				if got := kproxyRules(t); got != 0 {
					t.Errorf("%d kproxy rules after the flow was released, want 0", got)
				}
			})
		}
	}

	t.Run("Clean removes rules and table routes", func(t *testing.T) {
		_, flow, err := dialKept(k, unix.SOCK_STREAM, unix.IPPROTO_TCP, client.IPv4, netip.AddrPortFrom(backend.IPv4, serverPort))
		if err != nil {
			t.Fatal(err)
		}
		_ = flow
		if err := replyroute.Clean(); err != nil {
			t.Fatal(err)
		}
		if got := kproxyRules(t); got != 0 {
			t.Errorf("%d kproxy rules after Clean, want 0", got)
		}
		if out := lab.Run(t, "ip", "-4", "route", "show", "table", fmt.Sprint(replyroute.Table)) +
			lab.Run(t, "ip", "-6", "route", "show", "table", fmt.Sprint(replyroute.Table)); strings.TrimSpace(out) != "" {
			t.Errorf("table %d after Clean:\n%s", replyroute.Table, out)
		}
	})
}
