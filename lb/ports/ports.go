// Package ports allocates the userspace relays' listening ports from
// --proxy-port-range. The allocator binds the socket itself, so a port is
// never handed out that something else grabbed in between: a port is ours
// exactly when bind succeeded.
package ports

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrRangeExhausted is wrapped by the error returned when every port of the
// range is taken.
var ErrRangeExhausted = errors.New("proxy port range exhausted")

// Range is an inclusive port range. The zero Range means "let the kernel
// choose" (port 0), which is --proxy-port-range's default "0-0".
type Range struct {
	Lo, Hi uint16
}

// KernelChosen reports whether the range leaves the choice to the kernel.
func (r Range) KernelChosen() bool { return r.Lo == 0 && r.Hi == 0 }

// Size is the number of ports in the range (0 when kernel-chosen).
func (r Range) Size() int {
	if r.KernelChosen() {
		return 0
	}
	return int(r.Hi) - int(r.Lo) + 1
}

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// ParseRange parses --proxy-port-range: "" or "0-0" (kernel-chosen), "lo-hi",
// "lo+n" (n ports from lo, kube-proxy's other spelling) or a single port.
func ParseRange(s string) (Range, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Range{}, nil
	}
	var lo, hi int
	var err error
	switch {
	case strings.Contains(s, "-"):
		a, b, _ := strings.Cut(s, "-")
		if lo, err = parsePort(a, true); err != nil {
			return Range{}, fmt.Errorf("proxy port range %q: %w", s, err)
		}
		if hi, err = parsePort(b, true); err != nil {
			return Range{}, fmt.Errorf("proxy port range %q: %w", s, err)
		}
	case strings.Contains(s, "+"):
		a, b, _ := strings.Cut(s, "+")
		if lo, err = parsePort(a, false); err != nil {
			return Range{}, fmt.Errorf("proxy port range %q: %w", s, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(b))
		if err != nil || n < 1 {
			return Range{}, fmt.Errorf("proxy port range %q: size %q is not a positive number", s, b)
		}
		hi = lo + n - 1
		if hi > 65535 {
			return Range{}, fmt.Errorf("proxy port range %q: ends past port 65535", s)
		}
	default:
		if lo, err = parsePort(s, false); err != nil {
			return Range{}, fmt.Errorf("proxy port range %q: %w", s, err)
		}
		hi = lo
	}
	if (lo == 0) != (hi == 0) {
		return Range{}, fmt.Errorf("proxy port range %q: 0 is only valid as \"0-0\" (kernel-chosen)", s)
	}
	if lo > hi {
		return Range{}, fmt.Errorf("proxy port range %q: start %d is after end %d", s, lo, hi)
	}
	return Range{Lo: uint16(lo), Hi: uint16(hi)}, nil
}

func parsePort(s string, zeroOK bool) (int, error) {
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 0 || p > 65535 || (p == 0 && !zeroOK) {
		return 0, fmt.Errorf("%q is not a valid port", s)
	}
	return p, nil
}

// Protocol names a port space: TCP and UDP (and SCTP) ports are independent.
type Protocol string

const (
	TCP  Protocol = "tcp"
	UDP  Protocol = "udp"
	SCTP Protocol = "sctp"
)

type key struct {
	proto Protocol
	ipv6  bool
	port  uint16
}

// Allocator hands out ports of one Range. It is safe for concurrent use.
type Allocator struct {
	r Range

	mu   sync.Mutex
	used map[key]struct{}
	// next is where the search starts per port space: handing ports out in
	// rotation keeps a just-released port (whose old connections may linger
	// in TIME_WAIT or conntrack) out of use for as long as possible.
	next map[key]uint16
}

// NewAllocator returns an allocator for r.
func NewAllocator(r Range) *Allocator {
	return &Allocator{r: r, used: map[key]struct{}{}, next: map[key]uint16{}}
}

// Range returns the allocator's range.
func (a *Allocator) Range() Range { return a.r }

// Claim finds a free port in the range and calls bind with it; bind opens the
// socket. A bind error for which errors.Is(err, syscall.EADDRINUSE) moves on
// to the next port; any other error is returned at once. For a kernel-chosen
// range bind is called once with port 0 and nothing is recorded. Claim
// returns the port bind succeeded with (0 when kernel-chosen: read the real
// port from the socket). ListenTCP and ListenUDP are built on it; SCTP
// relays can use it with their own bind.
func (a *Allocator) Claim(proto Protocol, ipv6 bool, bind func(port uint16) error) (uint16, error) {
	if a.r.KernelChosen() {
		if err := bind(0); err != nil {
			return 0, err
		}
		return 0, nil
	}
	space := key{proto: proto, ipv6: ipv6}
	a.mu.Lock()
	defer a.mu.Unlock()
	size := a.r.Size()
	start, ok := a.next[space]
	if !ok {
		start = a.r.Lo
	}
	inUse := 0
	for i := 0; i < size; i++ {
		port := uint16(int(a.r.Lo) + (int(start-a.r.Lo)+i)%size)
		k := key{proto: proto, ipv6: ipv6, port: port}
		if _, taken := a.used[k]; taken {
			continue
		}
		err := bind(port)
		if errors.Is(err, syscall.EADDRINUSE) {
			inUse++
			continue
		}
		if err != nil {
			return 0, err
		}
		a.used[k] = struct{}{}
		a.next[space] = a.r.Lo + uint16((int(port-a.r.Lo)+1)%size)
		return port, nil
	}
	return 0, fmt.Errorf("no free %s%s port in proxy port range %s (%d held by kproxy, %d taken by other sockets): %w",
		proto, family(ipv6), a.r, a.held(proto, ipv6), inUse, ErrRangeExhausted)
}

func family(ipv6 bool) string {
	if ipv6 {
		return "6"
	}
	return "4"
}

func (a *Allocator) held(proto Protocol, ipv6 bool) int {
	n := 0
	for k := range a.used {
		if k.proto == proto && k.ipv6 == ipv6 {
			n++
		}
	}
	return n
}

// Release returns a port that Claim handed out. Releasing a port that is not
// held (or any port of a kernel-chosen range) does nothing.
func (a *Allocator) Release(proto Protocol, ipv6 bool, port uint16) {
	a.mu.Lock()
	delete(a.used, key{proto: proto, ipv6: ipv6, port: port})
	a.mu.Unlock()
}

// ReleaseAddr returns the port of a listener or socket address obtained from
// ListenTCP or ListenUDP (pass its Addr()/LocalAddr() after closing it).
func (a *Allocator) ReleaseAddr(addr net.Addr) {
	switch addr := addr.(type) {
	case *net.TCPAddr:
		ap := addr.AddrPort()
		a.Release(TCP, !ap.Addr().Unmap().Is4(), ap.Port())
	case *net.UDPAddr:
		ap := addr.AddrPort()
		a.Release(UDP, !ap.Addr().Unmap().Is4(), ap.Port())
	}
}

// ListenTCP opens a TCP listener on ip (usually 0.0.0.0 or ::) at a port of
// the range. An IPv6 listener accepts IPv6 only.
func (a *Allocator) ListenTCP(ip netip.Addr) (*net.TCPListener, error) {
	return listen(a, TCP, ip, func(network string, addr netip.AddrPort) (*net.TCPListener, error) {
		var lc net.ListenConfig
		// Plain TCP: Go listens with MPTCP by default, whose sockets refuse
		// socket filters and cost more per accept than a proxy needs.
		lc.SetMultipathTCP(false)
		ln, err := lc.Listen(context.Background(), network, addr.String())
		if err != nil {
			return nil, err
		}
		return ln.(*net.TCPListener), nil
	})
}

// ListenUDP opens a UDP socket bound on ip at a port of the range.
func (a *Allocator) ListenUDP(ip netip.Addr) (*net.UDPConn, error) {
	return listen(a, UDP, ip, func(network string, addr netip.AddrPort) (*net.UDPConn, error) {
		return net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	})
}

// listen claims a port of the range for a proto socket on ip, which open
// binds to addr; network is proto's name for ip's family.
func listen[S any](a *Allocator, proto Protocol, ip netip.Addr, open func(network string, addr netip.AddrPort) (S, error)) (S, error) {
	network, ipv6 := networkFor(string(proto), ip)
	ip = ip.Unmap()
	var s S
	_, err := a.Claim(proto, ipv6, func(port uint16) error {
		var err error
		s, err = open(network, netip.AddrPortFrom(ip, port))
		return err
	})
	if err != nil {
		var none S
		return none, fmt.Errorf("allocating a %s proxy port on %s: %w", strings.ToUpper(string(proto)), ip, err)
	}
	return s, nil
}

// networkFor picks "tcp4"/"tcp6" so an IPv6 socket is IPV6_V6ONLY and the
// two families use separate port spaces, as their portals do.
func networkFor(base string, ip netip.Addr) (string, bool) {
	if ip.Unmap().Is4() {
		return base + "4", false
	}
	return base + "6", true
}
