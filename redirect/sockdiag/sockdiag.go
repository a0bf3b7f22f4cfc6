// Package sockdiag asks the kernel's socket diagnostics (sock_diag, the
// inet_diag netlink family that ss uses) which sockets of this network
// namespace hold an address and port, and who owns them.
//
// The netlink transport is github.com/vishvananda/netlink/nl. The request
// is built here rather than through netlink.SocketDiagTCP/SocketDiagUDP:
// those dump every socket in every state with no port filter, so on a node
// with tens of thousands of listeners (one per local portal) and
// connections each question would copy them all; they also leave out
// TCP's bound-but-not-listening sockets and do not read whether an IPv6
// socket is v6-only. Here the kernel filters by port (a bytecode filter)
// and by state, and returns only the few sockets on the port asked about.
package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Protocol is a transport protocol sock_diag can list.
type Protocol string

const (
	TCP Protocol = "TCP"
	UDP Protocol = "UDP"
)

// Holder is one socket holding an address and port.
type Holder struct {
	// Local is the address and port the socket is bound to: the address
	// asked about, or its family's wildcard, or the IPv6 wildcard.
	Local netip.AddrPort
	// UID owns the socket (the user that created it).
	UID uint32
	// Inode is the socket's inode: /proc/<pid>/fd of the process holding
	// it links to socket:[Inode].
	Inode uint32
}

func (h Holder) String() string {
	return fmt.Sprintf("%s uid %d socket inode %d", h.Local, h.UID, h.Inode)
}

// Finder answers which sockets hold an address and port.
type Finder interface {
	Holders(proto Protocol, ap netip.AddrPort) ([]Holder, error)
}

// Kernel is the Finder of the calling thread's network namespace.
type Kernel struct{}

// Holders lists the sockets that keep another socket from binding ap with
// proto: a TCP listener, a TCP socket bound and not listening (kernels
// that list those, 6.7 and later), or a UDP socket, bound to ap's address
// or to its family's wildcard on ap's port; for an IPv4 ap also IPv6
// sockets bound to the IPv6 wildcard that are not v6-only, or to ap's
// address mapped into IPv6.
func (Kernel) Holders(proto Protocol, ap netip.AddrPort) ([]Holder, error) {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	var states uint32
	var ipproto uint8
	switch proto {
	case TCP:
		ipproto, states = unix.IPPROTO_TCP, 1<<tcpListen|1<<tcpBoundInactive
	case UDP:
		// An unconnected UDP socket is in TCP_CLOSE, a connected one in
		// TCP_ESTABLISHED; both hold their port.
		ipproto, states = unix.IPPROTO_UDP, 1<<tcpClose|1<<tcpEstablished
	default:
		return nil, fmt.Errorf("sock_diag: protocol %q: %w", proto, errors.ErrUnsupported)
	}
	families := []uint8{unix.AF_INET6}
	if ap.Addr().Is4() {
		families = []uint8{unix.AF_INET, unix.AF_INET6}
	}
	var out []Holder
	for _, fam := range families {
		socks, err := dump(fam, ipproto, states, ap.Port())
		if err != nil {
			return nil, fmt.Errorf("sock_diag: listing %s sockets on port %d: %w", proto, ap.Port(), err)
		}
		for _, s := range socks {
			if s.local.Port() == ap.Port() && holds(s, ap.Addr()) {
				out = append(out, Holder{Local: s.local, UID: s.uid, Inode: s.inode})
			}
		}
	}
	return out, nil
}

// holds says whether socket s, on the port asked about, keeps addr from
// being bound.
func holds(s socket, addr netip.Addr) bool {
	bound := s.local.Addr()
	switch {
	case bound == addr:
		return true
	case bound.Is4():
		return bound.IsUnspecified() && addr.Is4()
	case bound.IsUnspecified():
		return addr.Is6() || !s.v6only
	}
	return bound.Is4In6() && bound.Unmap() == addr
}

// TCP states, as the kernel numbers them (include/net/tcp_states.h).
const (
	tcpEstablished   = 1
	tcpClose         = 7
	tcpListen        = 10
	tcpBoundInactive = 13
)

// inet_diag wire format (include/uapi/linux/inet_diag.h).
const (
	reqV2Len        = 56 // struct inet_diag_req_v2
	msgLen          = 72 // struct inet_diag_msg
	attrReqBytecode = 1  // INET_DIAG_REQ_BYTECODE
	attrSkV6Only    = 11 // INET_DIAG_SKV6ONLY
	bcSourceGE      = 2  // INET_DIAG_BC_S_GE
	bcSourceLE      = 3  // INET_DIAG_BC_S_LE
)

// diagModule names the kernel module that lists protocol's sockets.
func diagModule(protocol uint8) string {
	if protocol == unix.IPPROTO_UDP {
		return "udp_diag"
	}
	return "tcp_diag"
}

// request is struct inet_diag_req_v2 with an empty socket id: a dump.
type request struct {
	family, protocol uint8
	states           uint32
}

func (r *request) Len() int { return reqV2Len }

func (r *request) Serialize() []byte {
	b := make([]byte, reqV2Len)
	b[0], b[1] = r.family, r.protocol
	binary.NativeEndian.PutUint32(b[4:], r.states)
	return b
}

// portFilter is inet_diag bytecode keeping sockets whose local port is
// port: "sport >= port" then "sport <= port". Each comparison is two
// 4-byte ops (the second carries the port); a match jumps to the next
// comparison, a mismatch past the end, which the kernel reads as reject.
func portFilter(port uint16) []byte {
	const opLen, cmpLen = 4, 8
	b := make([]byte, 2*cmpLen)
	op := func(at int, code uint8, yes, no, value uint16) {
		b[at], b[at+1] = code, uint8(yes)
		binary.NativeEndian.PutUint16(b[at+2:], no)
		binary.NativeEndian.PutUint16(b[at+opLen+2:], value)
	}
	op(0, bcSourceGE, cmpLen, 2*cmpLen+opLen, port)
	op(cmpLen, bcSourceLE, cmpLen, cmpLen+opLen, port)
	return b
}

// socket is what Holders reads of one inet_diag_msg.
type socket struct {
	local  netip.AddrPort
	uid    uint32
	inode  uint32
	v6only bool
}

func dump(family, protocol uint8, states uint32, port uint16) ([]socket, error) {
	req := nl.NewNetlinkRequest(nl.SOCK_DIAG_BY_FAMILY, unix.NLM_F_DUMP)
	req.AddData(&request{family: family, protocol: protocol, states: states})
	req.AddData(nl.NewRtAttr(attrReqBytecode, portFilter(port)))
	var out []socket
	var parseErr error
	err := req.ExecuteIter(unix.NETLINK_INET_DIAG, nl.SOCK_DIAG_BY_FAMILY, func(msg []byte) bool {
		s, err := parse(msg)
		if err != nil {
			parseErr = err
			return false
		}
		out = append(out, s)
		return true
	})
	if errors.Is(err, syscall.ENOENT) {
		// The kernel has no diag handler for the protocol: its module
		// (tcp_diag, udp_diag) is absent and could not be loaded.
		return nil, fmt.Errorf("the kernel lists no such sockets (its %s module is not loaded): %w", diagModule(protocol), errors.ErrUnsupported)
	}
	return out, errors.Join(err, parseErr)
}

// parse reads an inet_diag_msg and its attributes.
func parse(msg []byte) (socket, error) {
	if len(msg) < msgLen {
		return socket{}, fmt.Errorf("inet_diag_msg of %d bytes, want %d", len(msg), msgLen)
	}
	var s socket
	port := binary.BigEndian.Uint16(msg[4:6])
	switch msg[0] {
	case unix.AF_INET:
		s.local = netip.AddrPortFrom(netip.AddrFrom4([4]byte(msg[8:12])), port)
	case unix.AF_INET6:
		s.local = netip.AddrPortFrom(netip.AddrFrom16([16]byte(msg[8:24])), port)
	default:
		return socket{}, fmt.Errorf("inet_diag_msg of address family %d", msg[0])
	}
	s.uid = binary.NativeEndian.Uint32(msg[64:68])
	s.inode = binary.NativeEndian.Uint32(msg[68:72])
	attrs, err := nl.ParseRouteAttr(msg[msgLen:])
	if err != nil {
		return socket{}, fmt.Errorf("inet_diag_msg attributes: %w", err)
	}
	for _, a := range attrs {
		if a.Attr.Type == attrSkV6Only && len(a.Value) > 0 {
			s.v6only = a.Value[0] != 0
		}
	}
	return s, nil
}
