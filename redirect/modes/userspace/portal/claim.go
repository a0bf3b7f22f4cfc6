package portal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Claim is a port held open so that nothing else on the node can bind it
// while a service uses it: a NodePort (Addr zero: the family's wildcard
// address) or the port of an externalIP or LoadBalancer IP that is one of
// the node's own addresses.
type Claim struct {
	Family   ipfamily.Family
	Protocol v1.Protocol
	Addr     netip.Addr
	Port     uint16
	Owner    servicemap.ServicePortName
}

type claimKey struct {
	fam   ipfamily.Family
	proto v1.Protocol
	addr  netip.Addr
	port  uint16
}

func (c Claim) key() claimKey { return claimKey{c.Family, c.Protocol, c.Addr, c.Port} }

// bindAddr is the address the claim's socket binds.
func (c Claim) bindAddr() netip.AddrPort {
	addr := c.Addr
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
		if c.Family == ipfamily.IPv6 {
			addr = netip.IPv6Unspecified()
		}
	}
	return netip.AddrPortFrom(addr, c.Port)
}

func (c Claim) String() string {
	return fmt.Sprintf("%s %s for %s", c.Protocol, c.bindAddr(), c.Owner)
}

// Opener opens the socket that holds a claim. Tests substitute fakes.
type Opener interface {
	Open(c Claim) (io.Closer, error)
}

// SocketOpener is the real Opener: a listening TCP or SCTP socket, or a
// bound UDP socket. Listening (rather than only binding) makes the claim
// visible in ss and netstat. IPv6 sockets are IPv6-only so they do not
// collide with the IPv4 claim of the same port.
type SocketOpener struct{}

// Open implements Opener.
func (SocketOpener) Open(c Claim) (io.Closer, error) {
	addr := c.bindAddr().String()
	suffix := "4"
	if c.Family == ipfamily.IPv6 {
		suffix = "6"
	}
	switch c.Protocol {
	case v1.ProtocolTCP:
		return (&net.ListenConfig{}).Listen(context.Background(), "tcp"+suffix, addr)
	case v1.ProtocolUDP:
		return (&net.ListenConfig{}).ListenPacket(context.Background(), "udp"+suffix, addr)
	case v1.ProtocolSCTP:
		return openSCTP(c)
	}
	return nil, fmt.Errorf("cannot claim a %q port", c.Protocol)
}

// fdCloser closes a raw socket.
type fdCloser int

func (f fdCloser) Close() error { return unix.Close(int(f)) }

// openSCTP holds an SCTP port with a one-to-one SCTP socket; Go's net
// package has no SCTP.
func openSCTP(c Claim) (io.Closer, error) {
	bind := c.bindAddr()
	domain := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(bind.Port()), Addr: bind.Addr().As4()}
	if c.Family == ipfamily.IPv6 {
		domain = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(bind.Port()), Addr: bind.Addr().As16()}
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return nil, fmt.Errorf("opening an SCTP socket: %w", err)
	}
	if domain == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			_ = unix.Close(fd)
			return nil, fmt.Errorf("setting IPV6_V6ONLY: %w", err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("bind sctp %s: %w", bind, err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("listen sctp %s: %w", bind, err)
	}
	return fdCloser(fd), nil
}

// ClaimError is a claim that could not be made: the port is taken by
// another process, or by another service port of the same snapshot.
type ClaimError struct {
	Claim Claim
	// Holder is the other service port wanting the same port ("" when the
	// socket could not be opened).
	Holder string
	Err    error
}

func (e *ClaimError) Error() string {
	if e.Holder != "" {
		return fmt.Sprintf("service port %s: %s port %s is already used by service port %s",
			e.Claim.Owner, e.Claim.Protocol, e.Claim.bindAddr(), e.Holder)
	}
	return fmt.Sprintf("service port %s: cannot claim %s port %s: %v",
		e.Claim.Owner, e.Claim.Protocol, e.Claim.bindAddr(), e.Err)
}

func (e *ClaimError) Unwrap() error { return e.Err }

// Claimer holds claim sockets across syncs.
type Claimer struct {
	opener Opener

	mu   sync.Mutex
	held map[claimKey]heldClaim
}

type heldClaim struct {
	owner  servicemap.ServicePortName
	socket io.Closer
}

// NewClaimer returns a Claimer opening sockets with opener (nil: SocketOpener).
func NewClaimer(opener Opener) *Claimer {
	if opener == nil {
		opener = SocketOpener{}
	}
	return &Claimer{opener: opener, held: map[claimKey]heldClaim{}}
}

// Sync makes the held sockets match want (both families' claims together):
// claims no longer wanted are released, new ones opened, and a claim that
// changed owner is handed over without closing its socket. Each claim that
// fails is a *ClaimError in the joined result, naming the service port;
// every other claim is still made. When two service ports want the same
// port, the one first in want order (Build sorts by name) gets it.
func (c *Claimer) Sync(want []Claim) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	wanted := make(map[claimKey]Claim, len(want))
	var errs []error
	for _, w := range want {
		if prev, dup := wanted[w.key()]; dup {
			if prev.Owner != w.Owner {
				errs = append(errs, &ClaimError{Claim: w, Holder: prev.Owner.String()})
			}
			continue
		}
		wanted[w.key()] = w
	}
	for k, h := range c.held {
		if _, ok := wanted[k]; !ok {
			c.release(k, h)
		}
	}
	for k, w := range wanted {
		if h, ok := c.held[k]; ok {
			h.owner = w.Owner
			c.held[k] = h
			continue
		}
		sock, err := c.opener.Open(w)
		if err != nil {
			errs = append(errs, &ClaimError{Claim: w, Err: err})
			continue
		}
		c.held[k] = heldClaim{owner: w.Owner, socket: sock}
		klog.V(2).InfoS("Claimed a service port", "claim", w.String())
	}
	return errors.Join(sortErrors(errs)...)
}

// Held lists the held claims, sorted.
func (c *Claimer) Held() []Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Claim, 0, len(c.held))
	for k, h := range c.held {
		out = append(out, Claim{Family: k.fam, Protocol: k.proto, Addr: k.addr, Port: k.port, Owner: h.owner})
	}
	sortClaims(out)
	return out
}

// Close releases every claim.
func (c *Claimer) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for k, h := range c.held {
		if err := h.socket.Close(); err != nil {
			errs = append(errs, fmt.Errorf("releasing %s port %s: %w", k.proto, netip.AddrPortFrom(k.addr, k.port), err))
		}
		delete(c.held, k)
	}
	return errors.Join(errs...)
}

func (c *Claimer) release(k claimKey, h heldClaim) {
	if err := h.socket.Close(); err != nil {
		klog.ErrorS(err, "Releasing a claimed service port", "protocol", k.proto, "port", strconv.Itoa(int(k.port)), "servicePort", h.owner.String())
	}
	delete(c.held, k)
}

func sortClaims(cs []Claim) { slices.SortFunc(cs, compareClaims) }

// sortErrors orders errors by message, so a joined error reads the same on
// every sync despite map iteration.
func sortErrors(errs []error) []error {
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}
