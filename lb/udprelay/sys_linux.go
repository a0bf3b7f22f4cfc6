package udprelay

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
)

// dialUDP opens a non-blocking UDP socket connected to ep. connect(2) on UDP
// only records the peer, so this never waits on the network.
func dialUDP(ep netip.AddrPort) (int, error) {
	sa, err := eventloop.SockaddrOf(ep)
	if err != nil {
		return -1, err
	}
	fd, err := eventloop.Socket(sa.Family(), unix.SOCK_DGRAM, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("creating UDP socket for %v: %w", ep, err)
	}
	if err := eventloop.Connect(fd, &sa); err != nil {
		eventloop.Close(fd)
		return -1, fmt.Errorf("connecting UDP socket to %v: %w", ep, err)
	}
	return fd, nil
}

// localAddr is the socket's own address (getsockname).
func localAddr(fd int) (netip.AddrPort, error) {
	var sa eventloop.Sockaddr
	if err := eventloop.Getsockname(fd, &sa); err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockname: %w", err)
	}
	return sa.AddrPort()
}
