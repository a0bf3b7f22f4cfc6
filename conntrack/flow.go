package conntrack

import (
	"fmt"
	"net/netip"
)

// Protocol is an IP protocol number, as conntrack reports it.
type Protocol uint8

// The protocols service ports use.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// Family is an IP family; conntrack keeps a table per family.
type Family uint8

// The families, in the order cleanup visits them.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// Families lists both families.
func Families() []Family { return []Family{IPv4, IPv6} }

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// FamilyOf returns the family of addr (IPv4-mapped IPv6 addresses are IPv4).
func FamilyOf(addr netip.Addr) Family {
	if addr.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// Flow is the part of a conntrack entry cleanup decides on.
type Flow struct {
	Protocol Protocol
	// OrigSrc and OrigDst are the client and the address it sent to (a
	// service IP and port, or a node address and node port).
	OrigSrc, OrigDst netip.AddrPort
	// ReplySrc is who answers: the endpoint after DNAT, a local proxy port
	// after REDIRECT, or OrigDst itself when no NAT rewrote the flow.
	ReplySrc netip.AddrPort
}

// translated says whether NAT rewrote the flow's destination.
func (f Flow) translated() bool { return f.ReplySrc != f.OrigDst }

func (f Flow) String() string {
	return fmt.Sprintf("%s %s -> %s (reply from %s)", f.Protocol, f.OrigSrc, f.OrigDst, f.ReplySrc)
}
