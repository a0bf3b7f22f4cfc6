package kernel

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DirectRoutes lists the destinations of the main table's gatewayless
// unicast routes other than default ones: the addresses this node reaches
// on a link of its own (a pod's veth, a bridge), not through another node.
func DirectRoutes() ([]netip.Prefix, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("listing the main routing table: %w", err)
	}
	var out []netip.Prefix
	for _, r := range routes {
		// A default route without a gateway (a tunnel) reaches everything,
		// other nodes included.
		if r.Type != unix.RTN_UNICAST || r.Gw != nil || r.Via != nil || len(r.MultiPath) > 0 || r.LinkIndex <= 0 || r.Dst == nil {
			continue
		}
		bits, _ := r.Dst.Mask.Size()
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok || bits == 0 {
			continue
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), bits).Masked())
	}
	return out, nil
}
