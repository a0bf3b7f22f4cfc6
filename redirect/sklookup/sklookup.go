// Package sklookup steers packets addressed to service addresses into a few
// shared sockets with a BPF socket-lookup program (BPF_PROG_TYPE_SK_LOOKUP,
// Linux 5.9+) attached to a network namespace. The kernel runs the program
// before its own listener and unconnected-UDP lookup, so a socket another
// process bound to a service address (or to 0.0.0.0) is never chosen for a
// service port, and a service address answers on no other port.
//
// The program is assembled in Go (no C compiler). Its maps: the targets
// (protocol, address, port → Steer or Drop), the guarded addresses (every
// service address: a port that is not a target is dropped), and the four
// sockets targets are steered to, one per protocol and IP family.
//
// Established TCP connections and connected UDP sockets are looked up by the
// kernel before the program runs; see Steering.
package sklookup

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Protocol is an IP protocol the program steers.
type Protocol uint8

const (
	TCP Protocol = unix.IPPROTO_TCP
	UDP Protocol = unix.IPPROTO_UDP
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	}
	return fmt.Sprintf("protocol %d", uint8(p))
}

// Slot names the shared socket a target's packets go to.
type Slot uint32

const (
	TCP4 Slot = iota
	TCP6
	UDP4
	UDP6
	// The discarding slots, one per serving slot in the same order, take
	// the targets whose action is Discard.
	TCP4Discard
	TCP6Discard
	UDP4Discard
	UDP6Discard
	// The node-only slots, likewise, take the targets whose action is
	// ServeNode.
	TCP4ServeNode
	TCP6ServeNode
	UDP4ServeNode
	UDP6ServeNode
	slotCount
)

// discardingOffset is how far a serving slot's discarding slot is.
const discardingOffset = TCP4Discard - TCP4

// Discarding is the discarding slot of serving slot s.
func (s Slot) Discarding() Slot { return s%discardingOffset + discardingOffset }

// ServingNode is the node-only slot of serving slot s.
func (s Slot) ServingNode() Slot { return s%discardingOffset + 2*discardingOffset }

func (s Slot) String() string {
	switch s {
	case TCP4:
		return "TCP4"
	case TCP6:
		return "TCP6"
	case UDP4:
		return "UDP4"
	case UDP6:
		return "UDP6"
	case TCP4Discard, TCP6Discard, UDP4Discard, UDP6Discard:
		return (s - discardingOffset).String() + " discarding"
	case TCP4ServeNode, TCP6ServeNode, UDP4ServeNode, UDP6ServeNode:
		return (s - 2*discardingOffset).String() + " node-only"
	}
	return fmt.Sprintf("slot %d", uint32(s))
}

// protocol is the socket protocol the slot holds.
func (s Slot) protocol() Protocol {
	if s%discardingOffset == UDP4 || s%discardingOffset == UDP6 {
		return UDP
	}
	return TCP
}

// SlotFor is the slot the program steers a target of protocol p at addr to.
func SlotFor(p Protocol, addr netip.Addr) Slot {
	s := TCP4
	if p == UDP {
		s = UDP4
	}
	if addr.Unmap().Is6() {
		s++
	}
	return s
}

// Target is a service address and port of one protocol. IPv4 addresses are
// given unmapped: Sync refuses IPv4-mapped IPv6 addresses and zones.
type Target struct {
	Protocol Protocol
	Addr     netip.AddrPort
}

func (t Target) String() string { return t.Protocol.String() + " " + t.Addr.String() }

// Action is what the program does with a target's packets.
type Action uint8

const (
	// Steer assigns the packet to the socket in the target's slot.
	Steer Action = iota + 1
	// Drop drops the packet (a service port with no endpoints to reach, or
	// a source the service refuses); no socket found, the kernel refuses
	// the client (a reset, an ICMP port unreachable).
	Drop
	// Discard assigns the packet to the socket in the target's discarding
	// slot, which the caller makes drop what it gets (a socket filter), so
	// the client hears nothing and retries, as behind a DROP rule.
	Discard
	// ServeNode assigns the packet to the socket in the target's node-only
	// slot, which the caller makes serve the node's own clients and drop
	// the others' (a socket filter on the source): externalTrafficPolicy
	// Local without local endpoints, which kube-proxy short-circuits for
	// traffic that starts on the node.
	ServeNode
)

func (a Action) String() string {
	switch a {
	case Steer:
		return "steer"
	case Drop:
		return "drop"
	case Discard:
		return "discard"
	case ServeNode:
		return "serve-node"
	}
	return fmt.Sprintf("action %d", uint8(a))
}

// Capacities of the maps. Their entries are allocated as they are added
// (BPF_F_NO_PREALLOC), so an empty map costs only its hash buckets.
const (
	MaxTargets = 1 << 17
	MaxGuarded = 1 << 16
)

// mapKey is the key of both hash maps, laid out as the program builds it on
// its stack: IPv4 addresses as ::ffff:a.b.c.d, and the family besides, so an
// IPv4 key never equals an IPv6 one. Guarded addresses have Port and Proto 0.
type mapKey struct {
	Addr   [16]byte
	Port   uint16 // host byte order, as the context gives it
	Proto  uint8
	Family uint8
}

// keySize is mapKey's size in the maps; the program writes exactly these
// bytes, so the Go struct must have no padding (checked at compile time).
const keySize = 20

var _ [keySize]byte = [unsafe.Sizeof(mapKey{})]byte{}

func addrKey(a netip.Addr) mapKey {
	a = a.Unmap()
	k := mapKey{Addr: a.As16(), Family: unix.AF_INET}
	if a.Is6() {
		k.Family = unix.AF_INET6
	}
	return k
}

func targetKey(t Target) (mapKey, error) {
	if t.Protocol != TCP && t.Protocol != UDP {
		return mapKey{}, fmt.Errorf("target %s: only TCP and UDP can be steered", t)
	}
	switch a := t.Addr.Addr(); {
	case !a.IsValid():
		return mapKey{}, fmt.Errorf("target %s: no address", t)
	case a.Is4In6():
		return mapKey{}, fmt.Errorf("target %s: give IPv4 addresses unmapped", t)
	case a.Zone() != "":
		return mapKey{}, fmt.Errorf("target %s: an address with a zone cannot be steered", t)
	}
	k := addrKey(t.Addr.Addr())
	k.Port, k.Proto = t.Addr.Port(), uint8(t.Protocol)
	return k, nil
}

// guardedKey takes IPv4-mapped addresses as IPv4 and ignores zones: an
// address guarded twice is guarded once.
func guardedKey(a netip.Addr) (mapKey, error) {
	if !a.IsValid() {
		return mapKey{}, fmt.Errorf("guarded address %v: not an address", a)
	}
	return addrKey(a.WithZone("")), nil
}
