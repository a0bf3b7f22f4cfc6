package kernel

import (
	"fmt"
	"net"
	"net/netip"
)

// InterfaceAddresses lists the addresses on this network namespace's
// interfaces (IPv4-mapped ones unmapped): what --nodeport-addresses
// selects from.
func InterfaceAddresses() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}

// InterfacePrefixes lists the node's addresses with their prefix lengths
// (address/length, not masked: Addr is the address, Contains tells the
// link's subnet), IPv4-mapped addresses unmapped.
func InterfacePrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing interface addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, netip.PrefixFrom(p.Addr().Unmap(), min(p.Bits(), p.Addr().Unmap().BitLen())))
		}
	}
	return out, nil
}
