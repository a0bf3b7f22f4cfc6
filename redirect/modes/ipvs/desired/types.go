// Package desired computes the state the IPVS mode wants in the kernel for
// one address family, from a service-map snapshot: virtual servers with their
// real servers, the addresses to bind on kube-ipvs0, the members of each
// ipset, the static iptables layer that uses those sets, and the sysctls the
// mode relies on. It follows kube-proxy v1.36's IPVS proxier; it is pure, so
// the reconciler and the tests share it.
package desired

import (
	"cmp"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Virtual-server flags, as the kernel defines them (IP_VS_SVC_F_*).
const (
	// FlagPersistent makes the service sticky per client address for
	// Timeout seconds: ClientIP session affinity.
	FlagPersistent uint32 = 0x1
	// FlagHashed is set by the kernel on every listed service; it is never
	// requested, and comparisons ignore it.
	FlagHashed uint32 = 0x2
	// FlagMHPort (IP_VS_SVC_F_SCHED2) makes the "mh" scheduler hash the
	// source port too, as kube-proxy asks for.
	FlagMHPort uint32 = 0x10
)

// Key identifies a virtual server the way IPVS does.
type Key struct {
	Addr     netip.Addr
	Protocol v1.Protocol
	Port     uint16
}

// String renders the key as "TCP/198.18.0.10:80" ("TCP/[fd00::1]:80").
func (k Key) String() string {
	return fmt.Sprintf("%s/%s", k.Protocol, netip.AddrPortFrom(k.Addr, k.Port))
}

// Compare orders keys by address, protocol, then port.
func (k Key) Compare(o Key) int {
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(k.Protocol, o.Protocol); c != 0 {
		return c
	}
	return cmp.Compare(k.Port, o.Port)
}

// VirtualServer is one IPVS service's identity and options.
type VirtualServer struct {
	Key
	Scheduler string
	Flags     uint32
	// Timeout is the persistence timeout in seconds (with FlagPersistent).
	Timeout uint32
}

// RealServer is one destination of a virtual server.
type RealServer struct {
	Addr   netip.Addr
	Port   uint16
	Weight int
}

// AddrPort returns the real server's address and port.
func (r RealServer) AddrPort() netip.AddrPort { return netip.AddrPortFrom(r.Addr, r.Port) }

// Service is a virtual server with its real servers, sorted by address and
// port, and the service port it was made for.
type Service struct {
	VirtualServer
	Owner servicemap.ServicePortName
	// Bind says Addr must be on kube-ipvs0 (cluster IPs, and external or
	// load-balancer IPs that are not already a local address).
	Bind        bool
	RealServers []RealServer
}

// Conflict records a virtual server two service ports both want; the first
// in service-port order keeps it.
type Conflict struct {
	Key         Key
	Kept, Loser servicemap.ServicePortName
}

// Sysctl is a kernel setting the mode depends on ("net/ipv4/vs/conntrack").
type Sysctl struct {
	Name  string
	Value int
}

// State is everything the mode wants for one family.
type State struct {
	Family ipfamily.Family
	// Services are sorted by Key.
	Services []Service
	// Addresses to bind on kube-ipvs0, sorted.
	Addresses []netip.Addr
	// Sets in a fixed order (see SetSpecs), each with sorted members.
	Sets []Set
	// Tables is the static iptables layer (nat, then filter).
	Tables []Table
	// Jumps enter the layer's chains from built-in chains.
	Jumps     []Jump
	Sysctls   []Sysctl
	Conflicts []Conflict
}

// Set returns the named set (kube-proxy's IPv4 name, such as SetClusterIP,
// even for IPv6 state) or nil.
func (s *State) Set(base string) *Set {
	for i := range s.Sets {
		if s.Sets[i].Spec.Base == base {
			return &s.Sets[i]
		}
	}
	return nil
}
