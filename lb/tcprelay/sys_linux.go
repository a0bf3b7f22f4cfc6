package tcprelay

import (
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/keepsource"
)

// Socket options every relayed socket gets. They match what Go's net package
// sets on the connections it dials and accepts, which the relay used before
// it managed its sockets itself: no Nagle delay (the relay must not hold
// back a small write waiting for an ACK) and TCP keep-alive probes after
// 15 s idle, every 15 s, so a vanished peer ends its connection. A dialed
// socket gets the keep-alive options once it has relayed a while (lazy
// keep-alive, timers.go).
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 15 * time.Second
)

// defaultKeepAliveDelay is how long a dialed socket relays before it gets
// its keep-alive options (lazy keep-alive, timers.go). Below keepAliveIdle,
// the first probe comes exactly when it would have with the options set at
// connect; above a request's usual life, short connections never pay the
// three system calls.
const defaultKeepAliveDelay = 5 * time.Second

type sockopt struct {
	level, opt, value int
	name              string
}

var (
	noDelay = sockopt{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1, "TCP_NODELAY"}
	// keepAlive: SO_KEEPALIVE first and TCP_KEEPIDLE last. Setting the
	// idle time on a socket with keep-alive on re-arms its timer from the
	// last segment received, so options set after a connection has been
	// idle a while still probe on time.
	keepAlive = []sockopt{
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(keepAliveInterval / time.Second), "TCP_KEEPINTVL"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(keepAliveIdle / time.Second), "TCP_KEEPIDLE"},
	}
)

func setOptions(fd int, opts ...sockopt) error {
	for _, o := range opts {
		if err := eventloop.SetsockoptInt(fd, o.level, o.opt, o.value); err != nil {
			return fmt.Errorf("setting %s: %w", o.name, err)
		}
	}
	return nil
}

// setListenerOptions sets every option above on a listening socket; the
// sockets it accepts inherit them, with no system call of their own.
func setListenerOptions(fd int) error {
	return setOptions(fd, append([]sockopt{noDelay}, keepAlive...)...)
}

// setKeepAlive turns keep-alive probes on for a dialed socket.
func setKeepAlive(fd int) error { return setOptions(fd, keepAlive...) }

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

// startConnect opens a non-blocking socket without Nagle's delay and
// starts connecting it to ep (keep-alive comes later, timers.go). done
// reports a connection already complete (connect(2) may finish at once);
// otherwise completion is signalled by writability. On error no descriptor
// is left open.
//
// The socket comes from keeper.Open (bound to client's address when keep
// is set and the dial qualifies); flow is then its steering, to release
// once the socket is closed, and keepErr why a transparent socket could
// not be had.
func startConnect(ep netip.AddrPort, keeper *keepsource.Keeper, keep bool, client netip.Addr) (fd int, flow keepsource.Flow, done bool, keepErr, err error) {
	sa, err := eventloop.SockaddrOf(ep)
	if err != nil {
		return -1, flow, false, nil, err
	}
	if fd, flow, keepErr, err = keeper.Open(keep, unix.SOCK_STREAM, unix.IPPROTO_TCP, client, ep); err != nil {
		return -1, flow, false, keepErr, err
	}
	fail := func(err error) (int, keepsource.Flow, bool, error, error) {
		eventloop.Close(fd)
		_ = keeper.Release(flow)
		return -1, keepsource.Flow{}, false, keepErr, err
	}
	if err := setOptions(fd, noDelay); err != nil {
		return fail(err)
	}
	switch err := eventloop.Connect(fd, &sa); err {
	case nil:
		return fd, flow, true, keepErr, nil
	case unix.EINPROGRESS:
		return fd, flow, false, keepErr, nil
	default:
		return fail(fmt.Errorf("connecting: %w", err))
	}
}
