package tcprelay

import (
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket options every relayed socket gets. They match what Go's net package
// sets on the connections it dials and accepts, which the relay used before
// it managed its sockets itself: no Nagle delay (the relay must not hold
// back a small write waiting for an ACK) and TCP keep-alive probes after
// 15 s idle, every 15 s, so a vanished peer ends its connection.
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 15 * time.Second
)

// setRelayOptions sets the options above on fd. Accepted sockets inherit
// them from the listening socket, so only the listener and dialed sockets
// need the calls.
func setRelayOptions(fd int) error {
	for _, o := range []struct {
		level, opt, value int
		name              string
	}{
		{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1, "TCP_NODELAY"},
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(keepAliveIdle / time.Second), "TCP_KEEPIDLE"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(keepAliveInterval / time.Second), "TCP_KEEPINTVL"},
	} {
		if err := rawSetsockoptInt(fd, o.level, o.opt, o.value); err != nil {
			return fmt.Errorf("setting %s: %w", o.name, err)
		}
	}
	return nil
}

// closeWithReset closes fd so that its peer sees a reset (SO_LINGER 0)
// rather than an orderly end of stream.
func closeWithReset(fd int) {
	linger := unix.Linger{Onoff: 1, Linger: 0}
	_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER,
		uintptr(unsafe.Pointer(&linger)), unsafe.Sizeof(linger), 0)
	rawClose(fd)
}

// accept takes one connection off a non-blocking listening socket, returning
// a non-blocking close-on-exec descriptor and the peer's address. It decodes
// the address in place instead of through unix.Accept4's allocated Sockaddr.
func accept(listenFD int) (int, netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6 // large enough for sockaddr_in too
	size := uint32(unsafe.Sizeof(sa))
	for {
		fd, _, errno := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(listenFD), uintptr(unsafe.Pointer(&sa)),
			uintptr(unsafe.Pointer(&size)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return -1, netip.AddrPort{}, errno
		}
		peer, err := decodeSockaddr(&sa)
		if err != nil {
			// Not an IP socket: nothing this relay can serve.
			closeWithReset(int(fd))
			return -1, netip.AddrPort{}, fmt.Errorf("accepted connection: %w", err)
		}
		return int(fd), peer, nil
	}
}

// localAddr is the socket's own address (getsockname).
func localAddr(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6
	size := uint32(unsafe.Sizeof(sa))
	if _, _, errno := unix.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)),
		uintptr(unsafe.Pointer(&size))); errno != 0 {
		return netip.AddrPort{}, fmt.Errorf("getsockname: %w", errno)
	}
	return decodeSockaddr(&sa)
}

// rawSockaddr is a sockaddr_in or sockaddr_in6 ready for connect(2).
type rawSockaddr struct {
	family int
	sa     unix.RawSockaddrInet6 // large enough for sockaddr_in too
	size   uintptr
}

// sockaddrOf converts an endpoint for connect(2). IPv4-mapped addresses are
// unmapped so an IPv4 endpoint gets an AF_INET socket.
func sockaddrOf(ep netip.AddrPort) (rawSockaddr, error) {
	addr := ep.Addr().Unmap()
	if !ep.IsValid() || ep.Port() == 0 {
		return rawSockaddr{}, fmt.Errorf("invalid endpoint %v", ep)
	}
	var r rawSockaddr
	port := ntohs(ep.Port()) // the same swap converts to network order
	if addr.Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&r.sa))
		sa4.Family, sa4.Port, sa4.Addr = unix.AF_INET, port, addr.As4()
		r.family, r.size = unix.AF_INET, unsafe.Sizeof(*sa4)
		return r, nil
	}
	r.sa.Family, r.sa.Port, r.sa.Addr = unix.AF_INET6, port, addr.As16()
	r.family, r.size = unix.AF_INET6, unsafe.Sizeof(r.sa)
	return r, nil
}

// startConnect opens a non-blocking socket with the relay's options and
// starts connecting it to ep. done reports a connection already complete
// (connect(2) may finish at once); otherwise completion is signalled by
// writability. On error no descriptor is left open.
func startConnect(ep netip.AddrPort) (fd int, done bool, err error) {
	sa, err := sockaddrOf(ep)
	if err != nil {
		return -1, false, err
	}
	fd, err = rawSocket(sa.family)
	if err != nil {
		return -1, false, fmt.Errorf("creating socket: %w", err)
	}
	if err := setRelayOptions(fd); err != nil {
		rawClose(fd)
		return -1, false, err
	}
	switch err := rawConnect(fd, unsafe.Pointer(&sa.sa), sa.size); err {
	case nil:
		return fd, true, nil
	case unix.EINPROGRESS:
		return fd, false, nil
	default:
		rawClose(fd)
		return -1, false, fmt.Errorf("connecting: %w", err)
	}
}

// socketError reads and clears the socket's pending error (SO_ERROR): how a
// non-blocking connect ended, or why a socket reported EPOLLERR.
func socketError(fd int) error {
	v, err := rawGetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if v != 0 {
		return unix.Errno(v)
	}
	return nil
}
