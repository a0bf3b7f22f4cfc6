package sctprelay

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
)

// Supported reports whether the kernel offers one-to-one SCTP sockets. It
// opens and closes one socket, so the mode calls it once at start. An
// absent protocol is (false, nil); anything else unexpected is returned.
func Supported() (bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		if protocolAbsent(err) {
			return false, nil
		}
		return false, fmt.Errorf("probing for SCTP sockets: %w", err)
	}
	unix.Close(fd)
	return true, nil
}

// protocolAbsent tells the errors socket(2) gives when the kernel has no
// SCTP (module missing or blacklisted) from real failures.
func protocolAbsent(err error) bool {
	return errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ESOCKTNOSUPPORT) ||
		errors.Is(err, unix.EAFNOSUPPORT)
}

// sockaddr converts an address for bind(2)/connect(2); IPv4-mapped IPv6
// addresses become IPv4 so the socket family matches.
func sockaddr(ap netip.AddrPort) (family int, sa unix.Sockaddr, err error) {
	if !ap.IsValid() {
		return 0, nil, fmt.Errorf("invalid SCTP address %v", ap)
	}
	addr := ap.Addr().Unmap()
	if addr.Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: addr.As4()}, nil
	}
	if addr.Zone() != "" {
		return 0, nil, fmt.Errorf("SCTP address %v: zoned addresses are not supported", ap)
	}
	return unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: addr.As16()}, nil
}

// openSocket opens a non-blocking one-to-one SCTP socket of ap's family and
// returns it with ap as bind(2) and connect(2) take it.
func openSocket(ap netip.AddrPort) (fd, family int, sa unix.Sockaddr, err error) {
	family, sa, err = sockaddr(ap)
	if err != nil {
		return -1, 0, nil, err
	}
	fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return -1, 0, nil, fmt.Errorf("creating SCTP socket for %v: %w", ap, err)
	}
	return fd, family, sa, nil
}

// addrPort converts what accept(2) or getsockname(2) returned.
func addrPort(sa unix.Sockaddr) (netip.AddrPort, error) {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)), nil
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("unexpected socket address %T", sa)
}

// Conn is one SCTP association on a one-to-one socket. Reads and writes go
// through Go's netpoller.
type Conn struct {
	file   *os.File
	raw    syscall.RawConn
	remote netip.AddrPort
	// beforeClose, when set, runs once before the socket is closed (the
	// relay forgets its dial there, before the port can be reused).
	beforeClose func()
	closing     sync.Once
}

func newConn(fd int, remote netip.AddrPort) (*Conn, error) {
	f, raw, err := pollable(fd, "sctp", "SCTP socket")
	if err != nil {
		return nil, err
	}
	return &Conn{file: f, raw: raw, remote: remote}, nil
}

// pollable hands fd over to an os.File named name, whose I/O and RawConn
// wait on the Go netpoller; what names the socket in the error.
func pollable(fd int, name, what string) (*os.File, syscall.RawConn, error) {
	f := os.NewFile(uintptr(fd), name)
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("registering %s: %w", what, err)
	}
	return f, raw, nil
}

func (c *Conn) Read(p []byte) (int, error)  { return c.file.Read(p) }
func (c *Conn) Write(p []byte) (int, error) { return c.file.Write(p) }

// Close ends the association gracefully (SHUTDOWN).
func (c *Conn) Close() error {
	c.closing.Do(func() {
		if c.beforeClose != nil {
			c.beforeClose()
		}
	})
	return c.file.Close()
}

// Abort ends the association with an ABORT rather than a SHUTDOWN, so the
// peer learns at once that it was refused.
func (c *Conn) Abort() {
	_ = c.raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	})
	c.Close()
}

// destination is the address the peer addressed the association to: its
// original destination when a portal rewrote it (conntrack knows it), else
// the socket's own address (a listener bound to the service address).
func (c *Conn) destination() (netip.AddrPort, error) {
	var (
		dst netip.AddrPort
		err error
	)
	cerr := c.raw.Control(func(fd uintptr) {
		level := unix.SOL_IP
		if c.remote.Addr().Is6() {
			level = unix.SOL_IPV6
		}
		var sa eventloop.Sockaddr
		if eventloop.GetsockoptSockaddr(int(fd), level, soOriginalDst, &sa) == nil {
			if dst, err = sa.AddrPort(); err == nil {
				return
			}
		}
		dst, err = localAddr(int(fd))
	})
	if cerr != nil {
		return netip.AddrPort{}, cerr
	}
	return netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()), err
}

// soOriginalDst is SO_ORIGINAL_DST (SOL_IP) and IP6T_SO_ORIGINAL_DST
// (SOL_IPV6); the kernel answers it for TCP and SCTP sockets.
const soOriginalDst = 80

func localAddr(fd int) (netip.AddrPort, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockname: %w", err)
	}
	return addrPort(sa)
}

// RemoteAddr is the peer's primary address.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// Listener accepts SCTP associations on a one-to-one socket.
type Listener struct {
	file *os.File
	raw  syscall.RawConn
	addr netip.AddrPort
	// closed is set by Close: the poller's error for a closed file does
	// not wrap os.ErrClosed, and Serve must tell "closed" from "failed".
	closed atomic.Bool
}

// Listen binds a one-to-one SCTP socket to addr (port 0: kernel-chosen).
func Listen(addr netip.AddrPort) (*Listener, error) {
	fd, family, sa, err := openSocket(addr)
	if err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("SCTP socket %v: SO_REUSEADDR: %w", addr, err)
	}
	// A specific address may be local only through a local route (the
	// userspace mode's local portals), which IPv6 does not accept for a
	// bind without IPV6_FREEBIND.
	if !addr.Addr().IsUnspecified() {
		level, opt := unix.SOL_IP, unix.IP_FREEBIND
		if family == unix.AF_INET6 {
			level, opt = unix.SOL_IPV6, unix.IPV6_FREEBIND
		}
		if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("SCTP socket %v: freebind: %w", addr, err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding SCTP socket to %v: %w", addr, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listening on SCTP %v: %w", addr, err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("SCTP socket %v: getsockname: %w", addr, err)
	}
	local, err := addrPort(bound)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	f, raw, err := pollable(fd, "sctp-listener", "SCTP listener")
	if err != nil {
		return nil, err
	}
	return &Listener{file: f, raw: raw, addr: local}, nil
}

// SyscallConn gives access to the listening socket (socket options such as
// a filter), as net.TCPListener's does.
func (l *Listener) SyscallConn() (syscall.RawConn, error) { return l.raw, nil }

// Addr is the bound address.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Accept waits for the next association; after Close it returns an error
// wrapping os.ErrClosed.
func (l *Listener) Accept() (*Conn, error) {
	var (
		nfd   int
		peer  unix.Sockaddr
		acErr error
	)
	err := l.raw.Read(func(fd uintptr) bool {
		nfd, peer, acErr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		// With nothing queued, the kernel's non-blocking SCTP accept
		// still sleeps until the next timer tick, and a signal meanwhile
		// (the Go runtime preempts with SIGURG) makes it fail with EINTR
		// rather than EAGAIN. Both mean "nothing queued yet": wait for
		// the next association. Returned as an error, EINTR stopped a
		// caller's accept loop while its socket still completed
		// handshakes, so those associations hung unaccepted.
		return !errors.Is(acErr, unix.EAGAIN) && !errors.Is(acErr, unix.EINTR)
	})
	if err != nil {
		if l.closed.Load() {
			return nil, fmt.Errorf("accepting SCTP association: %w", os.ErrClosed)
		}
		return nil, err
	}
	if acErr != nil {
		return nil, fmt.Errorf("accepting SCTP association: %w", acErr)
	}
	remote, _ := addrPort(peer) // informational only
	return newConn(nfd, remote)
}

// Close stops accepting.
func (l *Listener) Close() error {
	l.closed.Store(true)
	return l.file.Close()
}

// Dial opens an association to ep, waiting at most timeout for the
// handshake.
func Dial(ep netip.AddrPort, timeout time.Duration) (*Conn, error) { return dial(ep, timeout, nil) }

// dial is Dial that, when remember is set, tells it the association's local
// address before the INIT leaves (so before the peer can accept it) and
// runs what it returns before the socket closes.
func dial(ep netip.AddrPort, timeout time.Duration, remember func(local netip.AddrPort) (forget func())) (*Conn, error) {
	fd, family, sa, err := openSocket(ep)
	if err != nil {
		return nil, err
	}
	var forget func()
	if remember != nil {
		// On loopback the whole handshake runs inside connect(2), so a
		// listener of ours could accept the association before a local
		// address read after connect is remembered: bind first, to the
		// source address the route gives, and remember that.
		if local, err := bindSource(fd, family, sa); err == nil {
			forget = remember(local)
		}
	}
	err = unix.Connect(fd, sa)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		if forget != nil {
			forget()
		}
		unix.Close(fd)
		return nil, fmt.Errorf("connecting SCTP to %v: %w", ep, err)
	}
	if remember != nil && forget == nil {
		// No source address known before: remember the one connect chose.
		if local, err := localAddr(fd); err == nil {
			forget = remember(local)
		}
	}
	c, err := newConn(fd, ep)
	if err != nil {
		if forget != nil {
			forget()
		}
		return nil, err
	}
	c.beforeClose = forget
	if timeout > 0 {
		_ = c.file.SetWriteDeadline(time.Now().Add(timeout))
	}
	var soErr int
	werr := c.raw.Write(func(fd uintptr) bool {
		var gerr error
		soErr, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if gerr != nil {
			soErr = int(unix.EINVAL)
			return true
		}
		// Not yet writable and no error: the handshake is still running.
		return soErr != 0 || writable(int(fd))
	})
	_ = c.file.SetWriteDeadline(time.Time{})
	if werr == nil && soErr != 0 {
		werr = syscall.Errno(soErr)
	}
	if werr != nil {
		c.Close()
		return nil, fmt.Errorf("connecting SCTP to %v: %w", ep, werr)
	}
	return c, nil
}

// bindSource binds the SCTP socket fd to the source address the kernel's
// route to sa gives (found by connecting a UDP socket, which sends nothing)
// and a port of the kernel's choice, and returns that local address.
func bindSource(fd, family int, sa unix.Sockaddr) (netip.AddrPort, error) {
	probe, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("creating a route probe socket: %w", err)
	}
	defer unix.Close(probe)
	if err := unix.Connect(probe, sa); err != nil {
		return netip.AddrPort{}, fmt.Errorf("finding the route's source address: %w", err)
	}
	src, err := unix.Getsockname(probe)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("reading the route's source address: %w", err)
	}
	switch src := src.(type) {
	case *unix.SockaddrInet4:
		src.Port = 0
	case *unix.SockaddrInet6:
		src.Port = 0
	}
	if err := unix.Bind(fd, src); err != nil {
		return netip.AddrPort{}, fmt.Errorf("binding to the route's source address: %w", err)
	}
	return localAddr(fd)
}

// writable polls fd without waiting.
func writable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(pfd, 0)
	return err == nil && n == 1 && pfd[0].Revents&unix.POLLOUT != 0
}
