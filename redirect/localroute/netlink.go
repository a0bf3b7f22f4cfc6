package localroute

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Netlink is Routes on the real kernel, in the network namespace it is
// first used in. It keeps one netlink socket: the package-level functions
// of the netlink library open one per request, which at 30,000 routes was
// most of the first sync's route work.
type Netlink struct {
	mu     sync.Mutex
	handle *netlink.Handle
}

var _ Routes = (*Netlink)(nil)

// loopbackIndex is the kernel's LOOPBACK_IFINDEX: lo's index in every
// network namespace.
const loopbackIndex = 1

// open returns the socket, opening it on first use; a failed open is
// tried again on the next call.
func (n *Netlink) open() (*netlink.Handle, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handle == nil {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("opening a route netlink socket: %w", err)
		}
		n.handle = h
	}
	return n.handle, nil
}

func (n *Netlink) List(fam ipfamily.Family) ([]netip.Addr, error) {
	h, err := n.open()
	if err != nil {
		return nil, err
	}
	nf := fam.Domain()
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, Protocol: Protocol, Type: unix.RTN_LOCAL}
	routes, err := h.RouteListFiltered(nf, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TYPE)
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

func (n *Netlink) Add(addr netip.Addr) error {
	h, err := n.open()
	if err != nil {
		return err
	}
	return h.RouteAdd(route(addr))
}

func (n *Netlink) Delete(addr netip.Addr) error {
	h, err := n.open()
	if err != nil {
		return err
	}
	return h.RouteDel(route(addr))
}

// route is the local route for addr: on lo, in the local table, scope host,
// as the kernel's own local routes are.
func route(addr netip.Addr) *netlink.Route {
	addr = addr.Unmap()
	return &netlink.Route{
		LinkIndex: loopbackIndex,
		Dst:       &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())},
		Table:     unix.RT_TABLE_LOCAL,
		Type:      unix.RTN_LOCAL,
		Scope:     netlink.SCOPE_HOST,
		Protocol:  Protocol,
	}
}
