package sockdiag

import (
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/lab"
)

const nobody = 65534

// squatter is a socket a test binds: its protocol, where, how.
type squatter struct {
	proto    Protocol
	bind     netip.AddrPort
	v6only   bool
	uid      uint32
	freebind bool
}

// open binds s (and listens, for TCP), creating the socket as s.uid: the
// kernel takes a socket's owner from the creating thread's filesystem uid,
// which setfsuid changes for this thread alone. It returns the socket's
// inode.
func (s squatter) open(t *testing.T) uint32 {
	t.Helper()
	domain := unix.AF_INET
	if s.bind.Addr().Is6() {
		domain = unix.AF_INET6
	}
	typ := unix.SOCK_STREAM
	if s.proto == UDP {
		typ = unix.SOCK_DGRAM
	}
	runtime.LockOSThread()
	unix.Setfsuid(int(s.uid))
	fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, 0)
	unix.Setfsuid(0)
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	var sa unix.Sockaddr
	if domain == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(s.bind.Port()), Addr: s.bind.Addr().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(s.bind.Port()), Addr: s.bind.Addr().As16()}
		v6only := 0
		if s.v6only {
			v6only = 1
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only); err != nil {
			t.Fatal(err)
		}
	}
	if s.freebind {
		level, opt := unix.SOL_IP, unix.IP_FREEBIND
		if domain == unix.AF_INET6 {
			level, opt = unix.SOL_IPV6, unix.IPV6_FREEBIND
		}
		if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatalf("binding %s %s: %v", s.proto, s.bind, err)
	}
	if s.proto == TCP {
		if err := unix.Listen(fd, 8); err != nil {
			t.Fatal(err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return uint32(st.Ino)
}

// TestHolders binds sockets in a fresh namespace, one case at a time, and
// asks who holds service addresses: only the socket on the address (or a
// wildcard covering it), protocol and port is named, with its owner and
// inode.
func TestHolders(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	vip := netip.MustParseAddrPort("198.18.0.10:5000")
	vip6 := netip.MustParseAddrPort("[fd00::10]:5000")
	type ask struct {
		proto Protocol
		ap    netip.AddrPort
		held  bool // by the case's socket
	}
	for _, tc := range []struct {
		name string
		sock squatter
		asks []ask
	}{
		{"TCP listener on 0.0.0.0", squatter{proto: TCP, bind: netip.MustParseAddrPort("0.0.0.0:5000"), uid: nobody},
			[]ask{{TCP, vip, true}, {TCP, netip.MustParseAddrPort("198.18.0.11:5000"), true}, {UDP, vip, false},
				{TCP, netip.MustParseAddrPort("198.18.0.10:5001"), false}, {TCP, vip6, false}}},
		{"TCP listener on the VIP, IP_FREEBIND", squatter{proto: TCP, bind: vip, uid: nobody, freebind: true},
			[]ask{{TCP, vip, true}, {TCP, netip.MustParseAddrPort("198.18.0.11:5000"), false}, {UDP, vip, false}}},
		{"UDP socket on 0.0.0.0", squatter{proto: UDP, bind: netip.MustParseAddrPort("0.0.0.0:5000"), uid: nobody},
			[]ask{{UDP, vip, true}, {TCP, vip, false}, {UDP, netip.MustParseAddrPort("198.18.0.10:5001"), false}}},
		{"UDP socket on the VIP, IP_FREEBIND", squatter{proto: UDP, bind: vip, uid: 65533, freebind: true},
			[]ask{{UDP, vip, true}, {UDP, netip.MustParseAddrPort("198.18.0.11:5000"), false}}},
		{"TCP listener on [::], dual-stack", squatter{proto: TCP, bind: netip.MustParseAddrPort("[::]:5000"), uid: nobody},
			[]ask{{TCP, vip, true}, {TCP, vip6, true}, {UDP, vip, false}}},
		{"TCP listener on [::], v6-only", squatter{proto: TCP, bind: netip.MustParseAddrPort("[::]:5000"), uid: nobody, v6only: true},
			[]ask{{TCP, vip, false}, {TCP, vip6, true}}},
		{"UDP socket on [::], dual-stack", squatter{proto: UDP, bind: netip.MustParseAddrPort("[::]:5000"), uid: nobody},
			[]ask{{UDP, vip, true}, {UDP, vip6, true}}},
		{"TCP listener on the IPv6 VIP, IPV6_FREEBIND", squatter{proto: TCP, bind: vip6, uid: nobody, freebind: true, v6only: true},
			[]ask{{TCP, vip6, true}, {TCP, vip, false}, {TCP, netip.MustParseAddrPort("[fd00::11]:5000"), false}}},
		{"TCP listener on the VIP mapped into IPv6", squatter{proto: TCP, bind: netip.MustParseAddrPort("[::ffff:198.18.0.10]:5000"), uid: nobody, freebind: true},
			[]ask{{TCP, vip, true}, {TCP, netip.MustParseAddrPort("198.18.0.11:5000"), false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Bystanders, never holders of what is asked: a root
			// listener on another port, and a connection to it.
			other := squatter{proto: TCP, bind: netip.MustParseAddrPort("127.0.0.1:5001")}
			other.open(t)
			conn, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(conn)
			if err := unix.Connect(conn, &unix.SockaddrInet4{Port: 5001, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				t.Fatal(err)
			}

			inode := tc.sock.open(t)
			want := Holder{Local: tc.sock.bind, UID: tc.sock.uid, Inode: inode}
			for _, a := range tc.asks {
				got, err := Kernel{}.Holders(a.proto, a.ap)
				if err != nil {
					t.Fatalf("Holders(%s, %s): %v", a.proto, a.ap, err)
				}
				var wantList []Holder
				if a.held {
					wantList = []Holder{want}
				}
				if !slices.Equal(got, wantList) {
					t.Errorf("Holders(%s, %s) = %v, want %v", a.proto, a.ap, got, wantList)
				}
			}
		})
	}
}

// TestDumpFiltersByPort: the kernel applies the port filter, so a dump
// returns the sockets on that port only, whatever else is bound.
func TestDumpFiltersByPort(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for _, port := range []uint16{5000, 5001, 5002} {
		squatter{proto: TCP, bind: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}.open(t)
	}
	got, err := dump(unix.AF_INET, unix.IPPROTO_TCP, 1<<tcpListen, 5001)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].local != netip.MustParseAddrPort("127.0.0.1:5001") {
		t.Errorf("dump of port 5001 = %+v, want the one listener on 127.0.0.1:5001", got)
	}
}
