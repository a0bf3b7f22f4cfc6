// Package rawudp sends UDP datagrams from any local address and port,
// through one raw socket per IP family, so a relay holding one shared UDP
// socket for many service addresses can answer each client from the exact
// address and port it wrote to.
//
// Why raw sockets: a UDP socket can only send from its own port, and a
// socket bound to a service's address and port fails with EADDRINUSE
// whenever another local socket holds that port on the wildcard address,
// which is exactly the squatter socket-lookup steering defeats. A raw socket
// (SOCK_RAW, IPPROTO_UDP, without IP_HDRINCL) takes the UDP header from us
// and the IP header from the kernel, the source address coming per message
// from IP_PKTINFO / IPV6_PKTINFO; the kernel still routes and fragments, so
// datagrams up to 65,507 bytes (65,527 over IPv6) pass.
//
// The IPv4 checksum is computed here, not left at zero (which IPv4 allows):
// replies to remote clients cross real networks, where a zero checksum
// would let a corrupted payload through; the cost is measured in
// BenchmarkChecksum. The IPv6 checksum is the kernel's (IPV6_CHECKSUM).
//
// An unbound raw UDP socket is also handed a copy of every UDP datagram the
// host receives: a clone and a filter run per datagram, for every service's
// traffic and the node's own. So each socket is bound to an address no
// datagram is ever sent to (sending is unaffected: the source comes from the
// control message); where that bind fails, a drop-all socket filter and the
// smallest receive buffer still keep it from queueing any. Opening the
// sockets needs CAP_NET_RAW.
package rawudp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
)

// HeaderLen is the size of the UDP header a datagram buffer starts with.
const HeaderLen = 8

// MaxPayload is the largest UDP payload over IPv6 (65,507 over IPv4).
const MaxPayload = 65535 - HeaderLen

// sendBuffer is the send buffer the raw sockets ask for: every service's
// replies share them.
const sendBuffer = 4 << 20

// Socket is a pair of raw UDP sockets, one per IP family, that send
// datagrams built by Path. Its methods are safe for concurrent use; several
// relays may share one.
type Socket struct {
	v4, v6 int // -1 when the family is unavailable
}

// Open opens the raw sockets. IPv6 may be missing (a kernel without it);
// IPv4 may not. It needs CAP_NET_RAW, which kproxy has as it runs as root.
func Open() (*Socket, error) { return open(true) }

// open is Open; bind false leaves the sockets unbound, as the benchmark of
// what binding them saves needs.
func open(bind bool) (*Socket, error) {
	s := &Socket{v4: -1, v6: -1}
	var err error
	if s.v4, err = openRaw(unix.AF_INET, bind); err != nil {
		return nil, fmt.Errorf("raw UDP socket for IPv4 replies (needs CAP_NET_RAW): %w", err)
	}
	if s.v6, err = openRaw(unix.AF_INET6, bind); err != nil {
		if !errors.Is(err, unix.EAFNOSUPPORT) {
			unix.Close(s.v4)
			return nil, fmt.Errorf("raw UDP socket for IPv6 replies (needs CAP_NET_RAW): %w", err)
		}
		s.v6 = -1
	}
	return s, nil
}

func openRaw(family int, bind bool) (int, error) {
	fd, err := eventloop.Socket(family, unix.SOCK_RAW, unix.IPPROTO_UDP)
	if err != nil {
		return -1, err
	}
	if err := configure(fd, family); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if bind {
		// Best effort: the filter alone keeps a socket that cannot be bound empty.
		_ = bindAway(fd, family)
	}
	return fd, nil
}

// bindAway binds fd to an address of its family that no datagram is sent
// to, so the kernel hands it no copies: 0.0.0.1 (0.0.0.0/8 is never a
// destination; the kernel drops it as martian) or 100::1 (100::/64 is IPv6's
// discard-only prefix, RFC 6666). Neither is local, hence freebind.
func bindAway(fd, family int) error {
	if family == unix.AF_INET6 {
		// IPV6_FREEBIND is already set: IPV6_PKTINFO needs it too.
		return unix.Bind(fd, &unix.SockaddrInet6{Addr: [16]byte{0x01, 0x00, 15: 1}})
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, 1); err != nil {
		return err
	}
	return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{0, 0, 0, 1}})
}

func configure(fd, family int) error {
	// Receive nothing: drop every copy in the filter, before it is queued.
	prog := unix.SockFprog{Len: 1, Filter: &[]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fmt.Errorf("attaching the drop-all filter: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 0); err != nil { // the kernel's minimum
		return fmt.Errorf("shrinking the receive buffer: %w", err)
	}
	// Best effort: a larger buffer, as every service's replies share it.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sendBuffer) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sendBuffer)
	}
	if family == unix.AF_INET6 {
		// The kernel fills the checksum at offset 6 of what we write.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_CHECKSUM, 6); err != nil {
			return fmt.Errorf("enabling IPV6_CHECKSUM: %w", err)
		}
		// A service address may be local by route rather than assigned to
		// an interface; IPV6_PKTINFO accepts it as a source only with this.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1); err != nil {
			return fmt.Errorf("enabling IPV6_FREEBIND: %w", err)
		}
	}
	return nil
}

// Close closes the raw sockets.
func (s *Socket) Close() error {
	var errs []error
	for _, fd := range []*int{&s.v4, &s.v6} {
		if *fd >= 0 {
			errs = append(errs, unix.Close(*fd))
			*fd = -1
		}
	}
	return errors.Join(errs...)
}

// FD returns the raw socket that sends p's datagrams (with sendmmsg, each
// message's iovec holding the datagram WriteHeader filled and Address
// setting its name and control), or -1 when its family is unavailable.
func (s *Socket) FD(p *Path) int {
	if p.v6 {
		return s.v6
	}
	return s.v4
}

// Path is what every datagram from one address and port to another shares:
// the destination, the source as an IP_PKTINFO / IPV6_PKTINFO control
// message, and the IPv4 checksum's constant part. Build it once per flow.
type Path struct {
	name    eventloop.Sockaddr
	control [controlSpace]byte
	ports   [4]byte // source and destination port, network order
	pseudo  uint64  // IPv4: sum of the pseudo-header's addresses and protocol
	v6      bool
}

// controlSpace holds one cmsghdr with an in6_pktinfo (the larger).
const controlSpace = (unix.SizeofCmsghdr + unix.SizeofInet6Pktinfo + 7) &^ 7

// NewPath prepares datagrams from from to to. IPv4-mapped addresses are
// unmapped; both ends must be of one family.
func NewPath(from, to netip.AddrPort) (Path, error) {
	src, dst := from.Addr().Unmap(), to.Addr().Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() || from.Port() == 0 || to.Port() == 0 {
		return Path{}, fmt.Errorf("no UDP path from %v to %v", from, to)
	}
	var p Path
	binary.BigEndian.PutUint16(p.ports[0:], from.Port())
	binary.BigEndian.PutUint16(p.ports[2:], to.Port())
	cmsg := (*unix.Cmsghdr)(unsafe.Pointer(&p.control[0]))
	data := unsafe.Pointer(&p.control[unix.SizeofCmsghdr])
	if src.Is4() {
		// Raw IPv4 sockets ignore the port of the destination.
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&p.name.Raw))
		sa4.Family, sa4.Addr = unix.AF_INET, dst.As4()
		p.name.Len = unix.SizeofSockaddrInet4
		cmsg.Level, cmsg.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		cmsg.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		(*unix.Inet4Pktinfo)(data).Spec_dst = src.As4()
		s4, d4 := src.As4(), dst.As4()
		p.pseudo = sum(s4[:]) + sum(d4[:]) + uint64(bits.ReverseBytes16(unix.IPPROTO_UDP))
		return p, nil
	}
	// Raw IPv6 sockets take 0 or the protocol as the destination's port.
	p.name.Raw.Family, p.name.Raw.Addr = unix.AF_INET6, dst.As16()
	p.name.Len = unix.SizeofSockaddrInet6
	cmsg.Level, cmsg.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
	cmsg.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
	(*unix.Inet6Pktinfo)(data).Addr = src.As16()
	p.v6 = true
	return p, nil
}

// controlLen is the control message's length as sendmsg takes it.
func (p *Path) controlLen() int {
	if p.v6 {
		return unix.CmsgSpace(unix.SizeofInet6Pktinfo)
	}
	return unix.CmsgSpace(unix.SizeofInet4Pktinfo)
}

// Address points h at the datagram's destination and source; its iovec
// stays the caller's.
func (p *Path) Address(h *unix.Msghdr) {
	h.Name = (*byte)(unsafe.Pointer(&p.name.Raw))
	h.Namelen = p.name.Len
	h.Control = &p.control[0]
	h.SetControllen(p.controlLen())
}

// WriteHeader fills the UDP header at the start of dgram (HeaderLen bytes,
// then the payload), checksum included for IPv4. dgram must hold at most
// HeaderLen+MaxPayload bytes.
func (p *Path) WriteHeader(dgram []byte) {
	h := dgram[:HeaderLen]
	copy(h, p.ports[:])
	binary.BigEndian.PutUint16(h[4:], uint16(len(dgram)))
	h[6], h[7] = 0, 0
	if p.v6 {
		return
	}
	// Summed as little-endian words, which gives the checksum's bytes in
	// little-endian order (the ones'-complement sum does not care how
	// words are read, as long as every one is read alike).
	s, carry := bits.Add64(sum(dgram), p.pseudo+uint64(bits.ReverseBytes16(uint16(len(dgram)))), 0)
	c := ^fold(s + carry)
	if c == 0 {
		c = 0xffff // zero means "no checksum"
	}
	binary.LittleEndian.PutUint16(h[6:], c)
}

// sum adds b as little-endian 64-bit words with end-around carry, the
// ones'-complement sum of RFC 1071 done eight bytes at a time; an odd last
// byte counts as the first byte of a zero-padded word.
func sum(b []byte) uint64 {
	var s, carry uint64
	for len(b) >= 32 {
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b), carry)
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b[8:]), carry)
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b[16:]), carry)
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b[24:]), carry)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b), carry)
		b = b[8:]
	}
	var tail [8]byte
	copy(tail[:], b)
	s, carry = bits.Add64(s, binary.LittleEndian.Uint64(tail[:]), carry)
	s, carry = bits.Add64(s, 0, carry)
	return s + carry // cannot carry again: s was at most 2^64-2 after adding 1
}

// fold reduces a 64-bit ones'-complement sum to 16 bits.
func fold(s uint64) uint16 {
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return uint16(s)
}
