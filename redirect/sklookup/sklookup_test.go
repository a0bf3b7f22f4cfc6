package sklookup

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/lab"
)

var (
	vip4      = netip.MustParseAddr("198.18.0.10")
	vip6      = netip.MustParseAddr("fd00:18::10")
	dropVIP4  = netip.MustParseAddr("198.18.0.11") // its port 5000 is a Drop target
	udpOnly4  = netip.MustParseAddr("198.18.0.12") // only UDP 5000 is a target
	unguarded = netip.MustParseAddr("198.18.0.99") // local, but no service address
)

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// serviceState is the full set of targets and guarded addresses the test
// starts from.
func serviceState() (map[Target]Action, []netip.Addr) {
	return map[Target]Action{
		{TCP, ap(vip4, 5000)}:     Steer,
		{UDP, ap(vip4, 5000)}:     Steer,
		{TCP, ap(vip6, 5000)}:     Steer,
		{UDP, ap(vip6, 5000)}:     Steer,
		{TCP, ap(dropVIP4, 5000)}: Drop,
		{UDP, ap(dropVIP4, 5000)}: Drop,
		{UDP, ap(udpOnly4, 5000)}: Steer,
	}, []netip.Addr{vip4, vip6, dropVIP4, udpOnly4}
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
func TestSteering(t *testing.T) {
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

	s, err := Attach("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	t.Logf("program: %d instructions", s.Instructions())

	ourSockets := map[Slot]syscall.Conn{
		TCP4: srv.listenTCP("ours-tcp4", "tcp4", "127.0.0.1:0", sockOpts{}),
		TCP6: srv.listenTCP("ours-tcp6", "tcp6", "[::1]:0", sockOpts{}),
		UDP4: srv.listenUDP("ours-udp4", "udp4", "127.0.0.1:0", sockOpts{}),
		UDP6: srv.listenUDP("ours-udp6", "udp6", "[::1]:0", sockOpts{}),
	}
	for slot, c := range ourSockets {
		if err := s.SetSocket(slot, c); err != nil {
			t.Fatalf("SetSocket(%s): %v", slot, err)
		}
	}

	all, guarded := serviceState()
	without := func(drop ...Target) map[Target]Action {
		m := map[Target]Action{}
		for k, v := range all {
			m[k] = v
		}
		for _, d := range drop {
			delete(m, d)
		}
		return m
	}
	sync := func(targets map[Target]Action, guarded []netip.Addr) func(t *testing.T) {
		return func(t *testing.T) {
			if err := s.Sync(targets, guarded); err != nil {
				t.Fatalf("Sync: %v", err)
			}
		}
	}
	type probe struct {
		proto Protocol
		addr  netip.AddrPort
		want  outcome
	}
	phases := []struct {
		name   string
		before func(t *testing.T)
		probes []probe
	}{
		{"synced", sync(all, guarded), []probe{
			{TCP, ap(vip4, 5000), ours},
			{TCP, ap(vip6, 5000), ours},
			{UDP, ap(vip4, 5000), ours},
			{UDP, ap(vip6, 5000), ours},
			{UDP, ap(udpOnly4, 5000), ours},
			{TCP, ap(udpOnly4, 5000), refused},                      // guarded: the port is a target for UDP only
			{UDP, ap(vip4, 5001), refused},                          // guarded: not a service port
			{TCP, ap(dropVIP4, 5000), refused},                      // Drop target
			{UDP, ap(dropVIP4, 5000), refused},                      // Drop target
			{TCP, ap(vip4, 2222), refused},                          // the node listener is not reachable on a service address
			{TCP, ap(vip6, 2222), refused},                          // nor over IPv6
			{UDP, ap(vip4, 2222), refused},                          // nor over UDP
			{TCP, ap(netip.MustParseAddr("127.0.0.1"), 2222), node}, // but on other addresses
			{TCP, ap(unguarded, 2222), node},
			{UDP, ap(netip.MustParseAddr("127.0.0.1"), 2222), node},
		}},
		{"target removed, address still guarded", sync(without(Target{TCP, ap(vip4, 5000)}), guarded), []probe{
			{TCP, ap(vip4, 5000), refused},
			{UDP, ap(vip4, 5000), ours},
		}},
		{"address no longer a service address", sync(without(Target{TCP, ap(vip4, 5000)}, Target{UDP, ap(vip4, 5000)}), guarded[1:]), []probe{
			{TCP, ap(vip4, 5000), squatter},
			{UDP, ap(vip4, 5000), squatter},
			{TCP, ap(vip4, 2222), node},
			{TCP, ap(vip6, 5000), ours},
		}},
		{"re-added", sync(all, guarded), []probe{
			{TCP, ap(vip4, 5000), ours},
			{UDP, ap(vip4, 5000), ours},
			{TCP, ap(vip4, 2222), refused},
		}},
		{"slot emptied by closing its socket", func(t *testing.T) {
			for _, slot := range []Slot{TCP6, UDP6} {
				if err := ourSockets[slot].(interface{ Close() error }).Close(); err != nil {
					t.Fatal(err)
				}
			}
		}, []probe{
			{TCP, ap(vip6, 5000), refused}, // not the squatters on [::]:5000 and the VIP
			{UDP, ap(vip6, 5000), refused},
			{TCP, ap(vip4, 5000), ours},
		}},
		{"closed", func(t *testing.T) {
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}, []probe{
			{TCP, ap(vip4, 5000), squatter},
			{UDP, ap(vip4, 5000), squatter},
			{TCP, ap(vip6, 5000), squatter},
			{TCP, ap(vip4, 2222), node},
			{TCP, ap(dropVIP4, 5000), squatter},
		}},
	}
	for _, ph := range phases {
		if !t.Run(ph.name, func(t *testing.T) {
			ph.before(t)
			for _, p := range ph.probes {
				t.Run(p.proto.String()+" "+p.addr.String(), func(t *testing.T) {
					if p.proto == TCP {
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
func TestSetSocketRefuses(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	s, err := Attach("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer s.Close()
	srv := newServers(t)
	mptcp := func() syscall.Conn {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		l, err := lc.Listen(t.Context(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l.(*net.TCPListener)
	}
	// rawSocket is a socket of type typ bound to loopback port 0 (bind) or
	// not bound at all, and never listening.
	rawSocket := func(typ int, bind bool) func() syscall.Conn {
		return func() syscall.Conn {
			fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			f := os.NewFile(uintptr(fd), "test socket")
			t.Cleanup(func() { f.Close() })
			if bind {
				if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
					t.Fatal(err)
				}
			}
			return f
		}
	}
	for _, tc := range []struct {
		name    string
		slot    Slot
		conn    func() syscall.Conn
		wantErr string
	}{
		{"MPTCP listener", TCP4, mptcp, "MPTCP"},
		{"UDP socket in a TCP slot", TCP4, func() syscall.Conn { return srv.listenUDP("u", "udp4", "127.0.0.1:0", sockOpts{}) }, "want TCP"},
		{"TCP listener in a UDP slot", UDP4, func() syscall.Conn { return srv.listenTCP("l", "tcp4", "127.0.0.1:0", sockOpts{}) }, "want UDP"},
		{"IPv4 socket in an IPv6 slot", TCP6, func() syscall.Conn { return srv.listenTCP("l4", "tcp4", "127.0.0.1:0", sockOpts{}) }, "AF_INET6"},
		{"no such slot", Slot(7), func() syscall.Conn { return srv.listenTCP("l7", "tcp4", "127.0.0.1:0", sockOpts{}) }, "no such slot"},
		{"TCP socket bound but not listening", TCP4, rawSocket(unix.SOCK_STREAM, true), "the kernel refused"},
		{"UDP socket not bound", UDP4, rawSocket(unix.SOCK_DGRAM, false), "the kernel refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.SetSocket(tc.slot, tc.conn())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("SetSocket: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
