package trace

import (
	"fmt"
	"net/netip"
	"slices"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// check refuses sets and virtual servers the kernel could not hold, so a
// trace never answers from state that could not exist.
func (n Node) check(fam ipfamily.Family) error {
	names := make([]string, 0, len(n.Sets))
	for name := range n.Sets {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := n.Sets[name].check(); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	type key struct {
		proto string
		addr  netip.AddrPort
	}
	seen := map[key]bool{}
	for i, vs := range n.VirtualServers {
		if err := vs.check(fam); err != nil {
			return fmt.Errorf("virtual server %d (%s): %w", i, vs, err)
		}
		k := key{vs.Protocol, vs.Address}
		if seen[k] {
			return fmt.Errorf("virtual server %s is listed twice", vs)
		}
		seen[k] = true
	}
	return nil
}
