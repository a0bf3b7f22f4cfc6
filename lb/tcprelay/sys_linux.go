package tcprelay

import (
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
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
		if err := eventloop.SetsockoptInt(fd, o.level, o.opt, o.value); err != nil {
			return fmt.Errorf("setting %s: %w", o.name, err)
		}
	}
	return nil
}

// accept takes one connection off a non-blocking listening socket, returning
// a non-blocking close-on-exec descriptor and the peer's address, decoded in
// place rather than through unix.Accept4's allocated Sockaddr.
func accept(listenFD int) (int, netip.AddrPort, error) {
	var sa eventloop.Sockaddr
	fd, err := eventloop.Accept(listenFD, &sa)
	if err != nil {
		return -1, netip.AddrPort{}, err
	}
	peer, err := sa.AddrPort()
	if err != nil {
		// Not an IP socket: nothing this relay can serve.
		eventloop.CloseWithReset(fd)
		return -1, netip.AddrPort{}, fmt.Errorf("accepted connection: %w", err)
	}
	return fd, peer, nil
}

// localAddr is the socket's own address (getsockname).
func localAddr(fd int) (netip.AddrPort, error) {
	var sa eventloop.Sockaddr
	if err := eventloop.Getsockname(fd, &sa); err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockname: %w", err)
	}
	return sa.AddrPort()
}

// startConnect opens a non-blocking socket with the relay's options and
// starts connecting it to ep. done reports a connection already complete
// (connect(2) may finish at once); otherwise completion is signalled by
// writability. On error no descriptor is left open.
func startConnect(ep netip.AddrPort) (fd int, done bool, err error) {
	sa, err := eventloop.SockaddrOf(ep)
	if err != nil {
		return -1, false, err
	}
	fd, err = eventloop.Socket(sa.Family(), unix.SOCK_STREAM, unix.IPPROTO_TCP)
	if err != nil {
		return -1, false, fmt.Errorf("creating socket: %w", err)
	}
	if err := setRelayOptions(fd); err != nil {
		eventloop.Close(fd)
		return -1, false, err
	}
	switch err := eventloop.Connect(fd, &sa); err {
	case nil:
		return fd, true, nil
	case unix.EINPROGRESS:
		return fd, false, nil
	default:
		eventloop.Close(fd)
		return -1, false, fmt.Errorf("connecting: %w", err)
	}
}
