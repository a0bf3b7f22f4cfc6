package localroute

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Netlink is Routes on the real kernel, in the current network namespace.
type Netlink struct{}

var _ Routes = Netlink{}

func (Netlink) List(fam ipfamily.Family) ([]netip.Addr, error) {
	nf := netlink.FAMILY_V4
	if fam == ipfamily.IPv6 {
		nf = netlink.FAMILY_V6
	}
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, Protocol: Protocol, Type: unix.RTN_LOCAL}
	routes, err := netlink.RouteListFiltered(nf, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TYPE)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones != bits {
			continue // not one of kproxy's: they are single addresses
		}
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

func (Netlink) Add(addr netip.Addr) error {
	r, err := route(addr)
	if err != nil {
		return err
	}
	return netlink.RouteAdd(r)
}

func (Netlink) Delete(addr netip.Addr) error {
	r, err := route(addr)
	if err != nil {
		return err
	}
	return netlink.RouteDel(r)
}

// route is the local route for addr: on lo, in the local table, scope host,
// as the kernel's own local routes are.
func route(addr netip.Addr) (*netlink.Route, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("finding the loopback link: %w", err)
	}
	addr = addr.Unmap()
	return &netlink.Route{
		LinkIndex: lo.Attrs().Index,
		Dst:       &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())},
		Table:     unix.RT_TABLE_LOCAL,
		Type:      unix.RTN_LOCAL,
		Scope:     netlink.SCOPE_HOST,
		Protocol:  Protocol,
	}, nil
}
