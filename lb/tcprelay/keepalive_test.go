package tcprelay

import (
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketOptions are the options of one of the relay's sockets that the
// relay sets itself or has its listener pass on.
type socketOptions struct{ noDelay, keepAlive, keepIdle, keepInterval int }

var relayed = socketOptions{noDelay: 1, keepAlive: 1, keepIdle: 15, keepInterval: 15}

// optionsOfSocket finds this process's socket connected from local to peer
// (the relay runs in the test's process) and reads its options.
func optionsOfSocket(t *testing.T, local, peer netip.AddrPort) socketOptions {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if addrOf(unix.Getsockname(fd)) != local || addrOf(unix.Getpeername(fd)) != peer {
			continue
		}
		var o socketOptions
		for _, opt := range []struct {
			level, opt int
			into       *int
		}{
			{unix.IPPROTO_TCP, unix.TCP_NODELAY, &o.noDelay},
			{unix.SOL_SOCKET, unix.SO_KEEPALIVE, &o.keepAlive},
			{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, &o.keepIdle},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, &o.keepInterval},
		} {
			if *opt.into, err = unix.GetsockoptInt(fd, opt.level, opt.opt); err != nil {
				t.Fatalf("reading an option of the socket %v → %v: %v", local, peer, err)
			}
		}
		if o.keepAlive == 0 {
			o.keepIdle, o.keepInterval = 0, 0 // the node's defaults, unused
		}
		return o
	}
	t.Fatalf("no socket of this process is connected from %v to %v", local, peer)
	return socketOptions{}
}

func addrOf(sa unix.Sockaddr, err error) netip.AddrPort {
	if in4, ok := sa.(*unix.SockaddrInet4); ok && err == nil {
		return netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port))
	}
	return netip.AddrPort{}
}

// TestDialedSocketKeepAlive: the relay's socket to an endpoint has no
// Nagle delay from the start and gets keep-alive probes (15 s idle, every
// 15 s) once it has relayed for the keep-alive delay, not at connect, so
// that short connections do without those system calls. The client's
// socket has every option from the listener at once.
func TestDialedSocketKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name        string
		delay       time.Duration
		wantBackend socketOptions // eventually; at once where delay is long
	}{
		{name: "within the delay", delay: time.Hour, wantBackend: socketOptions{noDelay: 1}},
		{name: "after the delay", delay: 50 * time.Millisecond, wantBackend: relayed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relayPeer := make(chan netip.AddrPort, 1)
			backend := serve(t, func(c *net.TCPConn) {
				relayPeer <- c.RemoteAddr().(*net.TCPAddr).AddrPort()
				echo(c)
			})
			ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			tp := startProxyOn(t, ln, Config{Picker: newPicker(backend), Direct: true, keepAliveDelay: tc.delay})
			c := dial(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tp.port))
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
				t.Fatal(err)
			}
			dialed := <-relayPeer
			client, proxyAddr := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
			if got := optionsOfSocket(t, proxyAddr, client); got != relayed {
				t.Errorf("client-side socket options = %+v, want %+v (from the listener)", got, relayed)
			}
			var got socketOptions
			deadline := time.Now().Add(10 * time.Second)
			for {
				got = optionsOfSocket(t, dialed, backend)
				if got == tc.wantBackend || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if got != tc.wantBackend {
				t.Errorf("dialed socket options = %+v, want %+v", got, tc.wantBackend)
			}
			// The connection still relays.
			if _, err := c.Write([]byte("pong")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			if _, err := io.ReadFull(c, b); err != nil || string(b) != "pong" {
				t.Errorf("echo after the options = %q, %v; want pong", b, err)
			}
		})
	}
}
