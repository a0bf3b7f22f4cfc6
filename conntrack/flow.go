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
