package replyroute_test

import (
	"context"
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
	"kproxy.dev/kproxy/sync/ipfamily"
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
// address, in both families, over TCP and UDP, with either steering; the
// client's own direct connections to the backend keep working meanwhile;
// per-flow rules go when their flows do; and Clean and CleanNFTables leave
// nothing behind.
func TestKernelKeepsClientAddress(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 1, DualStack: true})
	backend, client := topo.Backends[0], topo.Client
	families := []struct {
		name           string
		fam            ipfamily.Family
		client, server netip.Addr
	}{
		{"IPv4", ipfamily.IPv4, client.IPv4, backend.IPv4},
		{"IPv6", ipfamily.IPv6, client.IPv6, backend.IPv6},
	}
	for _, fam := range families {
		serveTCPPeer(t, backend, fam.server)
		serveUDPPeer(t, backend, fam.server)
	}
	rules := &replyroute.Netlink{}
	t.Cleanup(rules.Close)
	matched := replyroute.ByFamily{}
	for _, fam := range families {
		sm, err := replyroute.NewSocketMatch(context.Background(), fam.fam)
		if err != nil {
			t.Fatal(err)
		}
		if fam.fam == ipfamily.IPv4 {
			matched.IPv4 = sm
		} else {
			matched.IPv6 = sm
		}
	}
	for _, steering := range []struct {
		name    string
		steer   keepsource.Steering
		perFlow bool // one rule per open flow, none when all are closed
	}{
		{"per-flow rules", rules, true},
		{"socket match", matched, false},
	} {
		k := keepsource.New(steering.steer)
		k.SetView(&keepsource.View{Endpoints: map[netip.Addr]bool{backend.IPv4: true, backend.IPv6: true}})
		baseRules := kproxyRules(t)
		for _, fam := range families {
			ep := netip.AddrPortFrom(fam.server, serverPort)
			for _, proto := range []struct {
				name        string
				typ, number int
				network     string
			}{
				{"TCP", unix.SOCK_STREAM, unix.IPPROTO_TCP, "tcp"},
				{"UDP", unix.SOCK_DGRAM, unix.IPPROTO_UDP, "udp"},
			} {
				t.Run(steering.name+"/"+fam.name+"/"+proto.name, func(t *testing.T) {
					if !k.Keeps(fam.client, fam.server) {
						t.Fatalf("Keeps(%v, %v) = false, want true", fam.client, fam.server)
					}
					conn, flow, err := dialKept(k, proto.typ, proto.number, fam.client, ep)
					if err != nil {
						t.Fatal(err)
					}
					if got := kproxyRules(t) - baseRules; steering.perFlow && got != 1 {
						t.Errorf("%d kproxy rules for one open flow, want 1", got)
					}
					// A direct connection of the client to the backend, while
					// the flow is open: its replies must still reach the client.
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
					if got := kproxyRules(t) - baseRules; got != 0 {
						t.Errorf("%d kproxy rules more after the flow was released than before it", got)
					}
				})
			}
		}
	}

	t.Run("Clean and CleanNFTables remove rules, table routes and nftables tables", func(t *testing.T) {
		k := keepsource.New(rules)
		k.SetView(&keepsource.View{Endpoints: map[netip.Addr]bool{backend.IPv4: true}})
		if _, _, err := dialKept(k, unix.SOCK_STREAM, unix.IPPROTO_TCP, client.IPv4, netip.AddrPortFrom(backend.IPv4, serverPort)); err != nil {
			t.Fatal(err)
		}
		if err := replyroute.Clean(); err != nil {
			t.Fatal(err)
		}
		if err := replyroute.CleanNFTables(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := kproxyRules(t); got != 0 {
			t.Errorf("%d kproxy rules after Clean, want 0", got)
		}
		if out := lab.Run(t, "ip", "-4", "route", "show", "table", fmt.Sprint(replyroute.Table)) +
			lab.Run(t, "ip", "-6", "route", "show", "table", fmt.Sprint(replyroute.Table)); strings.TrimSpace(out) != "" {
			t.Errorf("table %d after Clean:\n%s", replyroute.Table, out)
		}
		if out := lab.Run(t, "nft", "list", "tables"); strings.Contains(out, replyroute.NFTable) {
			t.Errorf("nftables after CleanNFTables:\n%s", out)
		}
	})
}
