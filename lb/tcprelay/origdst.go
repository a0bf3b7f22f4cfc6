package tcprelay

import (
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (IPv4, level SOL_IP) and also
// IP6T_SO_ORIGINAL_DST (IPv6, level SOL_IPV6); x/sys/unix defines neither.
const soOriginalDst = 80

// originalDestination asks conntrack for the address the client originally
// connected to, before a REDIRECT or DNAT rewrote it. It fails (ENOENT) when
// conntrack has no entry for the connection.
func originalDestination(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("reading original destination: %w", err)
	}
	local, _ := c.LocalAddr().(*net.TCPAddr)
	ipv6 := local != nil && local.AddrPort().Addr().Is6() && !local.AddrPort().Addr().Is4In6()
	var (
		sa     unix.RawSockaddrInet6 // large enough for either family
		result netip.AddrPort
		soErr  error
	)
	err = rc.Control(func(fd uintptr) {
		level := unix.SOL_IP
		if ipv6 {
			level = unix.SOL_IPV6
		}
		size := uint32(unsafe.Sizeof(sa))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			soErr = errno
			return
		}
		result, soErr = decodeSockaddr(&sa)
	})
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("reading original destination: %w", err)
	}
	if soErr != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", soErr)
	}
	return result, nil
}

// decodeSockaddr turns a sockaddr_in or sockaddr_in6 (as filled in by the
// kernel, port in network byte order) into an AddrPort.
func decodeSockaddr(sa *unix.RawSockaddrInet6) (netip.AddrPort, error) {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), ntohs(sa4.Port)), nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), ntohs(sa.Port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("unexpected address family %d", sa.Family)
}

func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}
