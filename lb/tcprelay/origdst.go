package tcprelay

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (IPv4, level SOL_IP) and also
// IP6T_SO_ORIGINAL_DST (IPv6, level SOL_IPV6); x/sys/unix defines neither.
const soOriginalDst = 80

// originalDestination asks conntrack for the address the client originally
// connected to, before a REDIRECT or DNAT rewrote it. ipv6 says whether the
// connection is IPv6 (an IPv4 client of a dual-stack listener is not). It
// fails (ENOENT) when conntrack has no entry for the connection.
func originalDestination(fd int, ipv6 bool) (netip.AddrPort, error) {
	level := unix.SOL_IP
	if ipv6 {
		level = unix.SOL_IPV6
	}
	var sa unix.RawSockaddrInet6 // large enough for either family
	size := uint32(unsafe.Sizeof(sa))
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soOriginalDst,
		uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", errno)
	}
	return decodeSockaddr(&sa)
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
