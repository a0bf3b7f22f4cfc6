package trace

import (
	"fmt"
	"net/netip"
	"strings"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/internal/rulespec"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// The ipset types "-m set" is traced for: those kube-proxy's IPVS mode uses.
const (
	SetHashIP        = "hash:ip"
	SetHashIPPort    = "hash:ip,port"
	SetHashIPPortIP  = "hash:ip,port,ip"
	SetHashIPPortNet = "hash:ip,port,net"
	SetBitmapPort    = "bitmap:port"
)

// IPSet is one ipset as "-m set" sees it.
type IPSet struct {
	// Type is one of the Set* constants.
	Type string
	// Family is a hash set's address family; a packet of the other family
	// never matches it. A bitmap:port set has none.
	Family  ipfamily.Family
	Members []SetMember
}

// SetMember is one member of an IPSet; its type says which fields count:
//
//	hash:ip           Addr
//	hash:ip,port      Addr, Protocol, Port
//	hash:ip,port,ip   Addr, Protocol, Port, Addr2
//	hash:ip,port,net  Addr, Protocol, Port, Net
//	bitmap:port       Port
type SetMember struct {
	Addr netip.Addr
	// Protocol is "tcp", "udp" or "sctp".
	Protocol string
	Port     uint16
	Addr2    netip.Addr
	Net      netip.Prefix
}

// part is one dimension of a set type: what the n-th src/dst flag of a
// match selects.
type part uint8

const (
	partAddr part = iota + 1
	partPort
	partAddr2 // the third part of hash:ip,port,ip (an address) and of hash:ip,port,net (an address in a net)
)

// setParts lists a set type's dimensions in order.
func setParts(typ string) ([]part, bool) {
	switch typ {
	case SetHashIP:
		return []part{partAddr}, true
	case SetHashIPPort:
		return []part{partAddr, partPort}, true
	case SetHashIPPortIP, SetHashIPPortNet:
		return []part{partAddr, partPort, partAddr2}, true
	case SetBitmapPort:
		return []part{partPort}, true
	}
	return nil, false
}

// setKey is what a packet offers a set, one value per dimension.
type setKey struct {
	addr, addr2 netip.Addr
	port        uint16
}

// matchSet evaluates "-m set": each --match-set holds when the packet's
// key, taken by its src/dst flags, is a member (negation applied).
func (w *walker) matchSet(m rulespec.Match, f flow) (bool, error) {
	if w.node.Sets == nil {
		return false, fmt.Errorf(`match "set" is not modelled without Node.Sets (the sets' members)`)
	}
	for _, o := range m.Options {
		if o.Name != "--match-set" {
			return false, fmt.Errorf("%s is not modelled", o.Name)
		}
	}
	return allOptions(m, func(o rulespec.Option) (bool, error) {
		name, flags, _ := strings.Cut(o.Arg, " ")
		set, ok := w.node.Sets[name]
		if !ok {
			return false, fmt.Errorf("set %s is not in Node.Sets (the kernel refuses a rule naming a set that does not exist)", name)
		}
		return set.has(strings.Split(flags, ","), f)
	})
}

// has says whether the packet, looked at through dirs ("src"/"dst" per
// dimension), is in the set. Like the kernel: a match naming fewer
// dimensions than the set has, or a packet of another family than a hash
// set's, never matches, and bitmap:port only sees TCP and UDP ports.
func (s IPSet) has(dirs []string, f flow) (bool, error) {
	parts, _ := setParts(s.Type)
	if len(dirs) < len(parts) || (s.Type != SetBitmapPort && s.Family != ipfamily.Of(f.dst)) {
		return false, nil
	}
	if s.Type == SetBitmapPort && f.pkt.Protocol != "tcp" && f.pkt.Protocol != "udp" {
		return false, nil
	}
	var k setKey
	for i, p := range parts {
		src := dirs[i] == "src"
		switch p {
		case partAddr, partAddr2:
			a := f.dst
			if src {
				a = f.pkt.Source
			}
			if p == partAddr {
				k.addr = a
			} else {
				k.addr2 = a
			}
		case partPort:
			k.port = f.dport
			if src {
				if f.pkt.SourcePort == 0 {
					return false, fmt.Errorf("a src port flag needs Packet.SourcePort")
				}
				k.port = f.pkt.SourcePort
			}
		}
	}
	for _, m := range s.Members {
		if s.holds(m, k, f.pkt.Protocol) {
			return true, nil
		}
	}
	return false, nil
}

func (s IPSet) holds(m SetMember, k setKey, proto string) bool {
	switch s.Type {
	case SetHashIP:
		return m.Addr == k.addr
	case SetBitmapPort:
		return m.Port == k.port
	}
	if m.Addr != k.addr || m.Protocol != proto || m.Port != k.port {
		return false
	}
	switch s.Type {
	case SetHashIPPortIP:
		return m.Addr2 == k.addr2
	case SetHashIPPortNet:
		return m.Net.Contains(k.addr2)
	}
	return true
}

// check refuses a set the kernel could not hold: an unknown type, a hash
// set without a family, a member missing a field its type needs or
// carrying one it has not.
func (s IPSet) check() error {
	parts, ok := setParts(s.Type)
	if !ok {
		return fmt.Errorf("type %q is not modelled (want %s, %s, %s, %s or %s)", s.Type,
			SetHashIP, SetHashIPPort, SetHashIPPortIP, SetHashIPPortNet, SetBitmapPort)
	}
	hashed := s.Type != SetBitmapPort
	if hashed && s.Family != ipfamily.IPv4 && s.Family != ipfamily.IPv6 {
		return fmt.Errorf("a %s set needs a Family", s.Type)
	}
	hasPort := len(parts) > 1 // the hash types with a port
	for i, m := range s.Members {
		addrOK := func(a netip.Addr) bool { return a.IsValid() && ipfamily.Of(a) == s.Family }
		var problem string
		switch {
		case hashed != m.Addr.IsValid() || (hashed && !addrOK(m.Addr)):
			problem = "Addr"
		case hasPort != (m.Protocol != ""):
			problem = "Protocol"
		case hasPort && m.Protocol != "tcp" && m.Protocol != "udp" && m.Protocol != "sctp":
			problem = "Protocol (want tcp, udp or sctp)"
		case (s.Type == SetHashIPPortIP) != m.Addr2.IsValid() || (m.Addr2.IsValid() && !addrOK(m.Addr2)):
			problem = "Addr2"
		case (s.Type == SetHashIPPortNet) != m.Net.IsValid() || (m.Net.IsValid() && !addrOK(m.Net.Addr())):
			problem = "Net"
		case s.Type == SetHashIP && m.Port != 0:
			problem = "Port"
		}
		if problem != "" {
			return fmt.Errorf("member %d %+v: %s does not fit a %s %s set", i, m, problem, s.Family, s.Type)
		}
	}
	return nil
}
