package conntrack

import (
	"cmp"
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Destination is where clients send a service port's traffic: a service
// address (cluster, external or load-balancer IP) with the service port, or
// a node port, which is that port on any of the node's addresses of one
// family.
type Destination struct {
	Family ipfamily.Family
	// Addr is the service address and port; for a node port it has no
	// address, only the port.
	Addr netip.AddrPort
}

// ServiceAddress is the destination addr (an IP and the service port).
func ServiceAddress(addr netip.AddrPort) Destination {
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	return Destination{Family: ipfamily.Of(addr.Addr()), Addr: addr}
}

// NodePortOf is the node port port of family fam.
func NodePortOf(fam ipfamily.Family, port uint16) Destination {
	return Destination{Family: fam, Addr: netip.AddrPortFrom(netip.Addr{}, port)}
}

// IsNodePort says whether d is a node port.
func (d Destination) IsNodePort() bool { return !d.Addr.Addr().IsValid() }

// String renders "198.18.0.10:53" or "IPv4 node port 30053".
func (d Destination) String() string {
	if d.IsNodePort() {
		return fmt.Sprintf("%s node port %d", d.Family, d.Addr.Port())
	}
	return d.Addr.String()
}

// compareDestinations orders by family, then service addresses before node
// ports.
func compareDestinations(a, b Destination) int {
	return cmp.Or(cmp.Compare(a.Family, b.Family), compareBool(a.IsNodePort(), b.IsNodePort()), a.Addr.Compare(b.Addr))
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}
