package handles

import (
	"net/netip"

	"github.com/moby/ipvs"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

// ToService turns a desired virtual server into the handle's form, with the
// family and full netmask kube-proxy sets.
func ToService(vs desired.VirtualServer) *ipvs.Service {
	s := &ipvs.Service{
		Address:   vs.Addr.AsSlice(),
		Protocol:  uint16(protoNumbers[vs.Protocol]),
		Port:      vs.Port,
		SchedName: vs.Scheduler,
		Flags:     vs.Flags,
		Timeout:   vs.Timeout,
	}
	if vs.Addr.Is4() {
		s.AddressFamily, s.Netmask = unix.AF_INET, 0xffffffff
	} else {
		s.AddressFamily, s.Netmask = unix.AF_INET6, 128
	}
	return s
}

// FromService reads a listed service back; ok is false for services the
// mode never makes (firewall-mark services, unknown protocols).
func FromService(s *ipvs.Service) (vs desired.VirtualServer, ok bool) {
	addr, ok := netip.AddrFromSlice(s.Address)
	if !ok || s.FWMark != 0 {
		return desired.VirtualServer{}, false
	}
	var proto v1.Protocol
	for name, n := range protoNumbers {
		if uint16(n) == s.Protocol {
			proto = name
		}
	}
	if proto == "" {
		return desired.VirtualServer{}, false
	}
	return desired.VirtualServer{
		Key:       desired.Key{Addr: addr.Unmap(), Protocol: proto, Port: s.Port},
		Scheduler: s.SchedName,
		Flags:     s.Flags &^ desired.FlagHashed,
		Timeout:   s.Timeout,
	}, true
}

// ToDestination turns a real server into the handle's form (masquerading,
// as kube-proxy's real servers are).
func ToDestination(rs desired.RealServer) *ipvs.Destination {
	d := &ipvs.Destination{Address: rs.Addr.AsSlice(), Port: rs.Port, Weight: rs.Weight, ConnectionFlags: ipvs.ConnFwdMasq}
	if rs.Addr.Is4() {
		d.AddressFamily = unix.AF_INET
	} else {
		d.AddressFamily = unix.AF_INET6
	}
	return d
}

// FromDestination reads a listed destination back.
func FromDestination(d *ipvs.Destination) (desired.RealServer, bool) {
	addr, ok := netip.AddrFromSlice(d.Address)
	if !ok {
		return desired.RealServer{}, false
	}
	return desired.RealServer{Addr: addr.Unmap(), Port: d.Port, Weight: d.Weight}, true
}
