package handles

import (
	"fmt"
	"net"
	"net/netip"
)

// LocalAddressesExcept lists the addresses of every interface but the one
// named skip (IPv4-mapped ones unmapped). The IPVS mode serves NodePorts on
// the node's addresses, which must not include the service addresses it
// binds to DummyLink itself.
func LocalAddressesExcept(skip string) ([]netip.Addr, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	var out []netip.Addr
	for _, iface := range ifaces {
		if iface.Name == skip {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return nil, fmt.Errorf("listing addresses of %s: %w", iface.Name, err)
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				out = append(out, p.Addr().Unmap())
			}
		}
	}
	return out, nil
}
