package eventloop

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSyscallErrors checks that the raw wrappers report the kernel's errno
// as it is, so callers can tell EAGAIN from a failure.
func TestSyscallErrors(t *testing.T) {
	r, w := pipe(t)
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	Close(fds[0])
	Close(fds[1])
	closed := fds[0] // reused by no one: the test opens nothing after
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"read an empty pipe", func() error { _, err := Read(r, make([]byte, 1)); return err }, unix.EAGAIN},
		{"read nothing", func() error { _, err := Read(closed, nil); return err }, nil},
		{"read a closed descriptor", func() error { _, err := Read(closed, make([]byte, 1)); return err }, unix.EBADF},
		{"send on a pipe", func() error { _, err := Send(w, []byte{1}, unix.MSG_DONTWAIT); return err }, unix.ENOTSOCK},
		{"splice with no pipe", func() error { _, err := Splice(closed, w, 1); return err }, unix.EBADF},
		{"shutdown a pipe", func() error { return Shutdown(r, unix.SHUT_WR) }, unix.ENOTSOCK},
		{"socket option of a pipe", func() error { return SetsockoptInt(r, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1) }, unix.ENOTSOCK},
		{"socket error of a pipe", func() error { return SocketError(r) }, unix.ENOTSOCK},
		{"poll a pipe", func() error { _, err := Poll(r, make([]unix.EpollEvent, 1)); return err }, unix.EINVAL},
		{"accept on a pipe", func() error { _, err := Accept(r, &Sockaddr{}); return err }, unix.ENOTSOCK},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestDatagrams sends through a connected socket from Socket and Connect
// and reads with Recvmmsg, then replies with Sendmmsg to the address
// Recvmmsg reported.
func TestDatagrams(t *testing.T) {
	ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	server := ln.LocalAddr().(*net.UDPAddr).AddrPort()

	sa, err := SockaddrOf(server)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := Socket(sa.Family(), unix.SOCK_DGRAM, unix.IPPROTO_UDP)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd)
	if err := Connect(fd, &sa); err != nil {
		t.Fatal(err)
	}
	if _, err := Send(fd, []byte("ping"), unix.MSG_DONTWAIT); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, from, err := ln.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("server read %q, %v; want ping", buf[:n], err)
	}
	var local Sockaddr
	if err := Getsockname(fd, &local); err != nil {
		t.Fatal(err)
	}
	if got, _ := local.AddrPort(); got != from {
		t.Errorf("Getsockname = %v, the server saw %v", got, from)
	}

	// The reply comes back to fd; read it with Recvmmsg.
	if _, err := ln.WriteToUDPAddrPort([]byte("pong"), from); err != nil {
		t.Fatal(err)
	}
	hdrs := make([]Mmsghdr, 2)
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	hdrs[0].Hdr.Iov, hdrs[0].Hdr.Iovlen = &iov, 1
	var got int
	for got == 0 {
		got, err = Recvmmsg(fd, hdrs[:1])
		if errors.Is(err, unix.EAGAIN) {
			continue // not delivered yet
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(buf[:hdrs[0].Len]) != "pong" {
		t.Errorf("Recvmmsg read %q, want pong", buf[:hdrs[0].Len])
	}
	if n, err := Recvmmsg(fd, hdrs[:1]); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("Recvmmsg on a drained socket = %d, %v; want EAGAIN", n, err)
	}
	if _, err := Sendmmsg(fd, hdrs[:1]); err != nil {
		t.Errorf("Sendmmsg: %v", err)
	}
}

func TestSockaddr(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ep         netip.AddrPort
		wantFamily int
		want       string // AddrPort after the round trip
		err        bool
	}{
		{name: "IPv4", ep: netip.MustParseAddrPort("198.18.0.10:80"), wantFamily: unix.AF_INET, want: "198.18.0.10:80"},
		{name: "IPv6", ep: netip.MustParseAddrPort("[fd00::10]:443"), wantFamily: unix.AF_INET6, want: "[fd00::10]:443"},
		{name: "IPv4-mapped is unmapped", ep: netip.MustParseAddrPort("[::ffff:10.0.0.1]:53"), wantFamily: unix.AF_INET, want: "10.0.0.1:53"},
		{name: "high port", ep: netip.MustParseAddrPort("10.0.0.1:65535"), wantFamily: unix.AF_INET, want: "10.0.0.1:65535"},
		{name: "port 0", ep: netip.MustParseAddrPort("10.0.0.1:0"), err: true},
		{name: "invalid", ep: netip.AddrPort{}, err: true},
	} {
		sa, err := SockaddrOf(tc.ep)
		if (err != nil) != tc.err {
			t.Errorf("%s: SockaddrOf error %v, want error %v", tc.name, err, tc.err)
			continue
		}
		if tc.err {
			continue
		}
		if sa.Family() != tc.wantFamily {
			t.Errorf("%s: family %d, want %d", tc.name, sa.Family(), tc.wantFamily)
		}
		got, err := sa.AddrPort()
		if err != nil || got.String() != tc.want {
			t.Errorf("%s: AddrPort = %v, %v; want %s", tc.name, got, err, tc.want)
		}
	}
	unknown := Sockaddr{Raw: unix.RawSockaddrInet6{Family: unix.AF_UNIX}}
	if got, err := unknown.AddrPort(); err == nil {
		t.Errorf("AF_UNIX: AddrPort = %v, want an error", got)
	}
}

func TestDup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		closeIt bool // close the Go socket before Dup
		wantErr bool
	}{
		{name: "open socket"},
		{name: "closed socket", closeIt: true, wantErr: true},
	} {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		addr := c.LocalAddr().(*net.UDPAddr).AddrPort()
		if tc.closeIt {
			c.Close()
		}
		fd, err := Dup(c)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: Dup error %v, want error %v", tc.name, err, tc.wantErr)
		}
		c.Close()
		if err != nil {
			continue
		}
		// The duplicate outlives the Go socket.
		var sa Sockaddr
		if err := Getsockname(fd, &sa); err != nil {
			t.Errorf("%s: the duplicate is unusable after closing the original: %v", tc.name, err)
		} else if got, _ := sa.AddrPort(); got != addr {
			t.Errorf("%s: the duplicate is bound to %v, want %v", tc.name, got, addr)
		}
		Close(fd)
	}
}
