package eventloop

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sockaddr is a sockaddr_in or sockaddr_in6 as the kernel reads and writes
// it, so addresses go to and from system calls without allocation.
type Sockaddr struct {
	Raw unix.RawSockaddrInet6 // large enough for sockaddr_in too
	Len uint32
}

// SockaddrOf converts an endpoint for connect(2) or sendmsg(2).
// IPv4-mapped addresses are unmapped so an IPv4 endpoint gets an AF_INET
// socket.
func SockaddrOf(ep netip.AddrPort) (Sockaddr, error) {
	addr := ep.Addr().Unmap()
	if !ep.IsValid() || ep.Port() == 0 {
		return Sockaddr{}, fmt.Errorf("invalid endpoint %v", ep)
	}
	var s Sockaddr
	port := swap16(ep.Port()) // the same swap converts to network order
	if addr.Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.Raw))
		sa4.Family, sa4.Port, sa4.Addr = unix.AF_INET, port, addr.As4()
		s.Len = uint32(unsafe.Sizeof(*sa4))
		return s, nil
	}
	s.Raw.Family, s.Raw.Port, s.Raw.Addr = unix.AF_INET6, port, addr.As16()
	s.Len = uint32(unsafe.Sizeof(s.Raw))
	return s, nil
}

// Family is AF_INET or AF_INET6 (or whatever the kernel wrote).
func (s *Sockaddr) Family() int { return int(s.Raw.Family) }

// AddrPort decodes the address. IPv4-mapped IPv6 addresses are kept as
// they are, so a key made from them round-trips to the same peer.
func (s *Sockaddr) AddrPort() (netip.AddrPort, error) {
	switch s.Raw.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.Raw))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), swap16(sa4.Port)), nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(s.Raw.Addr), swap16(s.Raw.Port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("unexpected address family %d", s.Raw.Family)
}

// swap16 converts a port between host and network byte order (on either
// kind of host: it reads the bytes as stored).
func swap16(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}
