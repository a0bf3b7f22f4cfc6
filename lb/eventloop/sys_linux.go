package eventloop

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The loops' system calls never block (every descriptor is non-blocking,
// epoll_wait is called with a zero timeout, connect returns EINPROGRESS), so
// they are made with RawSyscall, without telling the Go scheduler; the loop
// keeps its P meanwhile, which it would use next anyway. Waiting is done on
// the netpoller (Poller.Wait), never in a system call. A scheduler-aware
// call made while every P is idle wakes the runtime's sysmon thread and
// resets its polling, and a relay goes idle and busy thousands of times a
// second (bench/MEASUREMENTS.md has the numbers).
//
// Calls that can be interrupted before doing anything retry on EINTR.

// count is a system call's result as a count, or its error.
func count(n uintptr, errno unix.Errno) (int, error) {
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// descriptor is a system call's result as a new descriptor, or -1 and its
// error.
func descriptor(fd uintptr, errno unix.Errno) (int, error) {
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// errorOf is a system call's error, nil for none.
func errorOf(errno unix.Errno) error {
	if errno != 0 {
		return errno
	}
	return nil
}

// Poll collects ready events without waiting (epoll_pwait, zero timeout, no
// signal mask: the one call every architecture has).
func Poll(epfd int, events []unix.EpollEvent) (int, error) {
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
			uintptr(len(events)), 0, 0, 0)
		if errno != unix.EINTR {
			return count(n, errno)
		}
	}
}

// EpollCtl is epoll_ctl(2).
func EpollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return errorOf(errno)
}

// Read is read(2).
func Read(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if errno != unix.EINTR {
			return count(n, errno)
		}
	}
}

// Send is send(2) with flags, e.g. MSG_NOSIGNAL (a peer that went away is
// an EPIPE to handle, not a signal) or MSG_DONTWAIT. An empty b is sent: a
// zero-length datagram is a datagram.
func Send(fd int, b []byte, flags int) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(p), uintptr(len(b)), uintptr(flags), 0, 0)
		if errno != unix.EINTR {
			return count(n, errno)
		}
	}
}

// Splice moves up to n bytes between from and to, one of them a pipe,
// without blocking.
func Splice(from, to, n int) (int, error) {
	for {
		m, _, errno := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(from), 0, uintptr(to), 0, uintptr(n),
			unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if errno != unix.EINTR {
			return count(m, errno)
		}
	}
}

// Mmsghdr is struct mmsghdr of recvmmsg(2)/sendmmsg(2); x/sys/unix has the
// system call numbers but no wrappers.
type Mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
	_   [4]byte
}

// Recvmmsg fills up to len(hdrs) messages without blocking and returns how
// many arrived.
func Recvmmsg(fd int, hdrs []Mmsghdr) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])),
		uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	return count(n, errno)
}

// Sendmmsg sends up to len(hdrs) messages without blocking and returns how
// many the kernel took; an error means the first one failed.
func Sendmmsg(fd int, hdrs []Mmsghdr) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])),
		uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	return count(n, errno)
}

// Shutdown is shutdown(2).
func Shutdown(fd, how int) error {
	_, _, errno := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), uintptr(how), 0)
	return errorOf(errno)
}

// Close closes a descriptor. For a socket with the default SO_LINGER it
// returns at once: the kernel sends what is queued, then the FIN.
func Close(fd int) {
	_, _, _ = unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// CloseWithReset closes a TCP socket so that its peer sees a reset
// (SO_LINGER 0) rather than an orderly end of stream.
func CloseWithReset(fd int) {
	linger := unix.Linger{Onoff: 1, Linger: 0}
	_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER,
		uintptr(unsafe.Pointer(&linger)), unsafe.Sizeof(linger), 0)
	Close(fd)
}

// SetsockoptInt sets an int socket option.
func SetsockoptInt(fd, level, opt, value int) error {
	v := int32(value)
	_, _, errno := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	return errorOf(errno)
}

// GetsockoptInt reads an int socket option.
func GetsockoptInt(fd, level, opt int) (int, error) {
	var v int32
	size := uint32(unsafe.Sizeof(v))
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}

// SocketError reads and clears the socket's pending error (SO_ERROR): how a
// non-blocking connect ended, or why a socket reported EPOLLERR.
func SocketError(fd int) error {
	v, err := GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if v != 0 {
		return unix.Errno(v)
	}
	return nil
}

// Socket opens a non-blocking, close-on-exec socket.
func Socket(family, typ, proto int) (int, error) {
	fd, _, errno := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family),
		uintptr(typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC), uintptr(proto))
	return descriptor(fd, errno)
}

// Connect starts a connect(2) on a non-blocking socket. For TCP,
// EINPROGRESS is its usual answer; an interrupted connect goes on in the
// background, so EINTR is reported as EINPROGRESS too.
func Connect(fd int, sa *Sockaddr) error {
	_, _, errno := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa.Raw)), uintptr(sa.Len))
	switch errno {
	case 0:
		return nil
	case unix.EINTR:
		return unix.EINPROGRESS
	}
	return errno
}

// Accept takes one connection off a non-blocking listening socket and
// returns a non-blocking, close-on-exec descriptor; peer receives the
// client's address.
func Accept(listenFD int, peer *Sockaddr) (int, error) {
	for {
		peer.Len = uint32(unsafe.Sizeof(peer.Raw))
		fd, _, errno := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(listenFD), uintptr(unsafe.Pointer(&peer.Raw)),
			uintptr(unsafe.Pointer(&peer.Len)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		if errno != unix.EINTR {
			return descriptor(fd, errno)
		}
	}
}

// Getsockname reads the socket's own address.
func Getsockname(fd int, sa *Sockaddr) error {
	sa.Len = uint32(unsafe.Sizeof(sa.Raw))
	_, _, errno := unix.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa.Raw)),
		uintptr(unsafe.Pointer(&sa.Len)))
	return errorOf(errno)
}

// GetsockoptSockaddr reads a socket option whose value is a socket address
// (SO_ORIGINAL_DST).
func GetsockoptSockaddr(fd, level, opt int, sa *Sockaddr) error {
	sa.Len = uint32(unsafe.Sizeof(sa.Raw))
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&sa.Raw)), uintptr(unsafe.Pointer(&sa.Len)), 0)
	return errorOf(errno)
}

// Dup returns a close-on-exec duplicate of the descriptor behind c (a Go
// socket), for a loop to own: the socket then stays valid until the loop
// closes its descriptor, whoever closes c.
func Dup(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("reading the socket's descriptor: %w", err)
	}
	fd, dupErr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("reading the socket's descriptor: %w", err)
	}
	if dupErr != nil {
		return -1, fmt.Errorf("duplicating the socket's descriptor: %w", dupErr)
	}
	return fd, nil
}
