package udprelay

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/keepsource"
)

// dialUDP opens a non-blocking UDP socket connected to ep. connect(2) on UDP
// only records the peer, so this never waits on the network. The socket
// comes from keeper.Open (bound to client's address when keep is set and
// the dial qualifies); flow is then its steering, to release once it is
// closed, and keepErr why a transparent socket could not be had.
func dialUDP(ep netip.AddrPort, keeper *keepsource.Keeper, keep bool, client netip.Addr) (fd int, flow keepsource.Flow, keepErr, err error) {
	sa, err := eventloop.SockaddrOf(ep)
	if err != nil {
		return -1, flow, nil, err
	}
	if fd, flow, keepErr, err = keeper.Open(keep, unix.SOCK_DGRAM, unix.IPPROTO_UDP, client, ep); err != nil {
		return -1, flow, keepErr, err
	}
	if err := eventloop.Connect(fd, &sa); err != nil {
		eventloop.Close(fd)
		_ = keeper.Release(flow)
		return -1, keepsource.Flow{}, keepErr, fmt.Errorf("connecting UDP socket to %v: %w", ep, err)
	}
	return fd, flow, keepErr, nil
}

// localAddr is the socket's own address (getsockname).
func localAddr(fd int) (netip.AddrPort, error) {
	var sa eventloop.Sockaddr
	if err := eventloop.Getsockname(fd, &sa); err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockname: %w", err)
	}
	return sa.AddrPort()
}

// originalDestination finds the IP_ORIGDSTADDR or IPV6_ORIGDSTADDR message
// in a datagram's control data: the address and port the client sent to.
// IPv4-mapped addresses are unmapped.
func originalDestination(control []byte) (netip.AddrPort, bool) {
	for len(control) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&control[0]))
		if h.Len < unix.SizeofCmsghdr || h.Len > uint64(len(control)) {
			return netip.AddrPort{}, false
		}
		data := control[unix.SizeofCmsghdr:h.Len]
		switch {
		case h.Level == unix.SOL_IP && h.Type == unix.IP_ORIGDSTADDR && len(data) >= unix.SizeofSockaddrInet4:
			sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&data[0]))
			return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), networkPort(sa.Port)), true
		case h.Level == unix.SOL_IPV6 && h.Type == unix.IPV6_ORIGDSTADDR && len(data) >= unix.SizeofSockaddrInet6:
			sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&data[0]))
			return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), networkPort(sa.Port)), true
		}
		next := unix.CmsgSpace(int(h.Len) - unix.SizeofCmsghdr)
		if next >= len(control) {
			break
		}
		control = control[next:]
	}
	return netip.AddrPort{}, false
}

// networkPort reads a port stored in network byte order.
func networkPort(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}
