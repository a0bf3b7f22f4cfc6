package sklookup_test

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/sklookup"
)

var (
	vip4      = netip.MustParseAddr("198.18.0.10")
	vip6      = netip.MustParseAddr("fd00:18::10")
	dropVIP4  = netip.MustParseAddr("198.18.0.11") // its port 5000 is a Drop target
	udpOnly4  = netip.MustParseAddr("198.18.0.12") // only UDP 5000 is a target
	discVIP4  = netip.MustParseAddr("198.18.0.13") // its port 5000 is a Discard target
	nodeVIP4  = netip.MustParseAddr("198.18.0.14") // its port 5000 is a ServeNode target
	unguarded = netip.MustParseAddr("198.18.0.99") // local, but no service address
)

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// serviceState is the full set of targets and guarded addresses the test
// starts from.
func serviceState() (map[sklookup.Target]sklookup.Action, []netip.Addr) {
	return map[sklookup.Target]sklookup.Action{
		{sklookup.TCP, ap(vip4, 5000)}:     sklookup.Steer,
		{sklookup.UDP, ap(vip4, 5000)}:     sklookup.Steer,
		{sklookup.TCP, ap(vip6, 5000)}:     sklookup.Steer,
		{sklookup.UDP, ap(vip6, 5000)}:     sklookup.Steer,
		{sklookup.TCP, ap(dropVIP4, 5000)}: sklookup.Drop,
		{sklookup.UDP, ap(dropVIP4, 5000)}: sklookup.Drop,
		{sklookup.UDP, ap(udpOnly4, 5000)}: sklookup.Steer,
		{sklookup.TCP, ap(discVIP4, 5000)}: sklookup.Discard,
		{sklookup.UDP, ap(discVIP4, 5000)}: sklookup.Discard,
		{sklookup.TCP, ap(nodeVIP4, 5000)}: sklookup.ServeNode,
		{sklookup.UDP, ap(nodeVIP4, 5000)}: sklookup.ServeNode,
	}, []netip.Addr{vip4, vip6, dropVIP4, udpOnly4, discVIP4, nodeVIP4}
}

// makeServiceAddressesLocal routes the test's service ranges to lo, as local
// portals make service addresses local.
func makeServiceAddressesLocal(t *testing.T) {
	lab.Run(t, "ip", "route", "add", "local", "198.18.0.0/24", "dev", "lo")
	lab.Run(t, "ip", "-6", "route", "add", "local", "fd00:18::/64", "dev", "lo")
}

// TestSteering runs real clients against real sockets in a fresh network
// namespace, phase by phase: squatters and a node listener bound before the
// program is attached, then targets synced, changed, a slot emptied, and the
// program closed.
func TestSteering(t *testing.T) { testSteering(t) }

// TestGuestSteering is TestSteering in the guest kernel (Linux 6.1), whose
// verifier and map allocator are older than the host's.
func TestGuestSteering(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	testSteering(t)
}

func testSteering(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	makeServiceAddressesLocal(t)
	srv := newServers(t)

	// Squatters on the service port, on the wildcard and on the service
	// address itself (bound early with FREEBIND), and the node's own
	// listeners on 2222: all there before the program.
	squat := sockOpts{reuse: true, freebind: true}
	for _, s := range []struct{ name, network, addr string }{
		{"squatter-any-tcp4", "tcp4", "0.0.0.0:5000"},
		{"squatter-vip-tcp4", "tcp4", "198.18.0.10:5000"},
		{"squatter-any-tcp6", "tcp6", "[::]:5000"},
		{"squatter-vip-tcp6", "tcp6", "[fd00:18::10]:5000"},
	} {
		srv.listenTCP(s.name, s.network, s.addr, squat)
	}
	for _, s := range []struct{ name, network, addr string }{
		{"squatter-any-udp4", "udp4", "0.0.0.0:5000"},
		{"squatter-vip-udp4", "udp4", "198.18.0.10:5000"},
		{"squatter-any-udp6", "udp6", "[::]:5000"},
		{"squatter-vip-udp6", "udp6", "[fd00:18::10]:5000"},
	} {
		srv.listenUDP(s.name, s.network, s.addr, squat)
	}
	srv.listenTCP("node-tcp4", "tcp4", "0.0.0.0:2222", sockOpts{})
	srv.listenTCP("node-tcp6", "tcp6", "[::]:2222", sockOpts{})
	srv.listenUDP("node-udp4", "udp4", "0.0.0.0:2222", sockOpts{})

	s, err := sklookup.Attach("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	t.Logf("program: %d instructions", s.Instructions())

	ourSockets := map[sklookup.Slot]syscall.Conn{
		sklookup.TCP4: srv.listenTCP("ours-tcp4", "tcp4", "127.0.0.1:0", sockOpts{}),
		sklookup.TCP6: srv.listenTCP("ours-tcp6", "tcp6", "[::1]:0", sockOpts{}),
		sklookup.UDP4: srv.listenUDP("ours-udp4", "udp4", "127.0.0.1:0", sockOpts{replyFromOrigDst: true}),
		sklookup.UDP6: srv.listenUDP("ours-udp6", "udp6", "[::1]:0", sockOpts{replyFromOrigDst: true}),
		// The discarding slots' sockets record what they get here; the
		// userspace mode makes its own drop everything.
		sklookup.TCP4Discard: srv.listenTCP("discarding-tcp4", "tcp4", "127.0.0.1:0", sockOpts{}),
		sklookup.UDP4Discard: srv.listenUDP("discarding-udp4", "udp4", "127.0.0.1:0", sockOpts{}),
		// Likewise the node-only slots': the userspace mode's serve the
		// node's own clients only.
		sklookup.TCP4ServeNode: srv.listenTCP("node-only-tcp4", "tcp4", "127.0.0.1:0", sockOpts{}),
		sklookup.UDP4ServeNode: srv.listenUDP("node-only-udp4", "udp4", "127.0.0.1:0", sockOpts{}),
	}
	for slot, c := range ourSockets {
		if err := s.SetSocket(slot, c); err != nil {
			t.Fatalf("SetSocket(%s): %v", slot, err)
		}
	}

	all, guarded := serviceState()
	without := func(drop ...sklookup.Target) map[sklookup.Target]sklookup.Action {
		m := map[sklookup.Target]sklookup.Action{}
		for k, v := range all {
			m[k] = v
		}
		for _, d := range drop {
			delete(m, d)
		}
		return m
	}
	sync := func(targets map[sklookup.Target]sklookup.Action, guarded []netip.Addr) func(t *testing.T) {
		return func(t *testing.T) {
			if err := s.Sync(targets, guarded); err != nil {
				t.Fatalf("Sync: %v", err)
			}
		}
	}
	type probe struct {
		proto sklookup.Protocol
		addr  netip.AddrPort
		want  outcome
	}
	phases := []struct {
		name   string
		before func(t *testing.T)
		probes []probe
	}{
		{"synced", sync(all, guarded), []probe{
			{sklookup.TCP, ap(vip4, 5000), ours},
			{sklookup.TCP, ap(vip6, 5000), ours},
			{sklookup.UDP, ap(vip4, 5000), ours},
			{sklookup.UDP, ap(vip6, 5000), ours},
			{sklookup.UDP, ap(udpOnly4, 5000), ours},
			{sklookup.TCP, ap(udpOnly4, 5000), refused},                      // guarded: the port is a target for UDP only
			{sklookup.UDP, ap(vip4, 5001), refused},                          // guarded: not a service port
			{sklookup.TCP, ap(dropVIP4, 5000), refused},                      // Drop target
			{sklookup.UDP, ap(dropVIP4, 5000), refused},                      // Drop target
			{sklookup.TCP, ap(discVIP4, 5000), discarding},                   // Discard target
			{sklookup.UDP, ap(discVIP4, 5000), discarding},                   // Discard target
			{sklookup.TCP, ap(nodeVIP4, 5000), nodeOnly},                     // ServeNode target
			{sklookup.UDP, ap(nodeVIP4, 5000), nodeOnly},                     // ServeNode target
			{sklookup.TCP, ap(vip4, 2222), refused},                          // the node listener is not reachable on a service address
			{sklookup.TCP, ap(vip6, 2222), refused},                          // nor over IPv6
			{sklookup.UDP, ap(vip4, 2222), refused},                          // nor over UDP
			{sklookup.TCP, ap(netip.MustParseAddr("127.0.0.1"), 2222), node}, // but on other addresses
			{sklookup.TCP, ap(unguarded, 2222), node},
			{sklookup.UDP, ap(netip.MustParseAddr("127.0.0.1"), 2222), node},
		}},
		{"target removed, address still guarded", sync(without(sklookup.Target{sklookup.TCP, ap(vip4, 5000)}), guarded), []probe{
			{sklookup.TCP, ap(vip4, 5000), refused},
			{sklookup.UDP, ap(vip4, 5000), ours},
		}},
		{"address no longer a service address", sync(without(sklookup.Target{sklookup.TCP, ap(vip4, 5000)}, sklookup.Target{sklookup.UDP, ap(vip4, 5000)}), guarded[1:]), []probe{
			{sklookup.TCP, ap(vip4, 5000), squatter},
			{sklookup.UDP, ap(vip4, 5000), squatter},
			{sklookup.TCP, ap(vip4, 2222), node},
			{sklookup.TCP, ap(vip6, 5000), ours},
		}},
		{"re-added", sync(all, guarded), []probe{
			{sklookup.TCP, ap(vip4, 5000), ours},
			{sklookup.UDP, ap(vip4, 5000), ours},
			{sklookup.TCP, ap(vip4, 2222), refused},
		}},
		{"slot emptied by closing its socket", func(t *testing.T) {
			for _, slot := range []sklookup.Slot{sklookup.TCP6, sklookup.UDP6} {
				if err := ourSockets[slot].(interface{ Close() error }).Close(); err != nil {
					t.Fatal(err)
				}
			}
		}, []probe{
			{sklookup.TCP, ap(vip6, 5000), refused}, // not the squatters on [::]:5000 and the VIP
			{sklookup.UDP, ap(vip6, 5000), refused},
			{sklookup.TCP, ap(vip4, 5000), ours},
		}},
		{"closed", func(t *testing.T) {
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}, []probe{
			{sklookup.TCP, ap(vip4, 5000), squatter},
			{sklookup.UDP, ap(vip4, 5000), squatter},
			{sklookup.TCP, ap(vip6, 5000), squatter},
			{sklookup.TCP, ap(vip4, 2222), node},
			{sklookup.TCP, ap(dropVIP4, 5000), squatter},
		}},
	}
	for _, ph := range phases {
		if !t.Run(ph.name, func(t *testing.T) {
			ph.before(t)
			for _, p := range ph.probes {
				t.Run(p.proto.String()+" "+p.addr.String(), func(t *testing.T) {
					if p.proto == sklookup.TCP {
						srv.expectTCP(t, p.addr, p.want)
					} else {
						srv.expectUDP(t, p.addr, p.want)
					}
				})
			}
		}) {
			return // later phases build on this one
		}
	}
}

// TestSetSocketRefuses checks that sockets the program could not assign are
// refused up front instead of making a slot drop everything.
func TestSetSocketRefuses(t *testing.T) { testSetSocketRefuses(t) }

func TestGuestSetSocketRefuses(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	testSetSocketRefuses(t)
}

func testSetSocketRefuses(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	s, err := sklookup.Attach("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name    string
		slot    sklookup.Slot
		conn    func(t *testing.T) syscall.Conn
		wantErr string
	}{
		{"MPTCP listener", sklookup.TCP4, mptcpListener, "MPTCP"},
		{"UDP socket in a TCP slot", sklookup.TCP4, udpSocket, "want TCP"},
		{"TCP listener in a UDP slot", sklookup.UDP4, tcpListener, "want UDP"},
		{"IPv4 socket in an IPv6 slot", sklookup.TCP6, tcpListener, "AF_INET6"},
		{"no such slot", sklookup.UDP6ServeNode + 1, tcpListener, "no such slot"},
		{"TCP socket in a UDP node-only slot", sklookup.UDP4ServeNode, tcpListener, "want UDP"},
		{"UDP socket in a TCP discarding slot", sklookup.TCP4Discard, udpSocket, "want TCP"},
		{"TCP socket bound but not listening", sklookup.TCP4, boundTCPSocket, "the kernel refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := tc.conn(t)
			if conn == nil {
				return // see the constructor's log
			}
			err := s.SetSocket(tc.slot, conn)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("SetSocket: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func tcpListener(t *testing.T) syscall.Conn {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(t.Context(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*net.TCPListener)
}

func mptcpListener(t *testing.T) syscall.Conn {
	var lc net.ListenConfig
	lc.SetMultipathTCP(true)
	l, err := lc.Listen(t.Context(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if proto := socketProtocol(t, l.(*net.TCPListener)); proto != unix.IPPROTO_MPTCP {
		// Not a skip: lab.InFreshNetns would report the whole test skipped.
		t.Logf("this kernel has no MPTCP (Go fell back to protocol %d): nothing to refuse", proto)
		return nil
	}
	return l.(*net.TCPListener)
}

func udpSocket(t *testing.T) syscall.Conn {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// boundTCPSocket is a TCP socket bound to a loopback port, not listening.
func boundTCPSocket(t *testing.T) syscall.Conn {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "test socket")
	t.Cleanup(func() { f.Close() })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	return f
}

func socketProtocol(t *testing.T, c syscall.Conn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var proto int
	var perr error
	if err := raw.Control(func(fd uintptr) {
		proto, perr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL)
	}); err != nil || perr != nil {
		t.Fatalf("reading SO_PROTOCOL: %v %v", err, perr)
	}
	return proto
}
