package udprelay

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr of recvmmsg(2)/sendmmsg(2); x/sys/unix has the
// syscall numbers but no wrappers.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// The loop's per-datagram system calls never block (MSG_DONTWAIT,
// non-blocking sockets, a zero epoll timeout), so they are made with
// RawSyscall, keeping the Go scheduler out: a scheduler-aware call made
// while every P is idle wakes the runtime's sysmon thread, which the TCP
// relay measured at about a tenth of its CPU (lb/tcprelay/rawsys_linux.go).

// recvmmsg fills up to len(hdrs) messages without blocking and returns how
// many arrived.
func recvmmsg(fd int, hdrs []mmsghdr) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])),
		uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// sendmmsg sends up to len(hdrs) messages without blocking and returns how
// many the kernel took; an error means the first one failed.
func sendmmsg(fd int, hdrs []mmsghdr) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])),
		uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// send writes one datagram on a connected socket without blocking.
func send(fd int, b []byte) error {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(p), uintptr(len(b)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// pollNow collects ready events without blocking (epoll_pwait, zero
// timeout, no signal mask: the one call every architecture has).
func pollNow(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// rawName holds a socket address as the kernel wrote it (sockaddr_in or
// sockaddr_in6), so replies can be addressed without converting it back.
type rawName struct {
	sa  unix.RawSockaddrInet6 // large enough for sockaddr_in too
	len uint32
}

// addrPort decodes the kernel's sockaddr. IPv4-mapped IPv6 addresses are
// kept as received: the key must round-trip to the same client.
func (n *rawName) addrPort() (netip.AddrPort, error) {
	switch n.sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&n.sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port), nil
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&n.sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(n.sa.Addr), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("unexpected address family %d", n.sa.Family)
}

// sockaddr converts an endpoint for connect(2). IPv4-mapped addresses are
// unmapped so an IPv4 endpoint gets an AF_INET socket.
func sockaddr(ep netip.AddrPort) (family int, sa unix.Sockaddr, err error) {
	addr := ep.Addr().Unmap()
	switch {
	case !ep.IsValid() || ep.Port() == 0:
		return 0, nil, fmt.Errorf("invalid endpoint %v", ep)
	case addr.Is4():
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(ep.Port()), Addr: addr.As4()}, nil
	default:
		return unix.AF_INET6, &unix.SockaddrInet6{Port: int(ep.Port()), Addr: addr.As16()}, nil
	}
}

// dialUDP opens a non-blocking UDP socket connected to ep. connect(2) on UDP
// only records the peer, so this never waits on the network.
func dialUDP(ep netip.AddrPort) (int, error) {
	family, sa, err := sockaddr(ep)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("creating UDP socket for %v: %w", ep, err)
	}
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connecting UDP socket to %v: %w", ep, err)
	}
	return fd, nil
}
