package ipvsscale

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Inventory is how much of one family's state a kernel holds: enough to
// tell a full apply from a silent no-op or a partial one.
type Inventory struct {
	VirtualServers int
	RealServers    int
	Addresses      int
	// SetMembers counts the members of each of the mode's sets, by name.
	SetMembers map[string]int
}

// Expected is the inventory want should leave in the kernel.
func Expected(want *desired.State) Inventory {
	inv := Inventory{
		VirtualServers: len(want.Services),
		Addresses:      len(want.Addresses),
		SetMembers:     make(map[string]int, len(want.Sets)),
	}
	for _, s := range want.Services {
		inv.RealServers += len(s.RealServers)
	}
	for _, s := range want.Sets {
		inv.SetMembers[s.Spec.Name] = len(s.Members)
	}
	return inv
}

// ReadInventory lists what the kernel holds of want's family through h:
// virtual servers and their real servers, kube-ipvs0's addresses, and the
// members of every set want declares.
func ReadInventory(h Handles, want *desired.State) (Inventory, error) {
	inv := Inventory{SetMembers: make(map[string]int, len(want.Sets))}
	services, err := h.IPVS.GetServices()
	if err != nil {
		return inv, fmt.Errorf("reading back IPVS services: %w", err)
	}
	for _, s := range services {
		vs, ok := handles.FromService(s)
		if !ok || ipfamily.Of(vs.Addr) != want.Family {
			continue
		}
		inv.VirtualServers++
		dests, err := h.IPVS.GetDestinations(s)
		if err != nil {
			return inv, fmt.Errorf("reading back the real servers of %s: %w", vs.Key, err)
		}
		inv.RealServers += len(dests)
	}
	addrs, err := h.Link.Addrs()
	if err != nil {
		return inv, fmt.Errorf("reading back the addresses of %s: %w", handles.DummyLink, err)
	}
	inv.Addresses = len(addrs)
	for _, s := range want.Sets {
		members, err := h.IPSets.List(s.Spec.Name)
		if err != nil {
			return inv, fmt.Errorf("reading back ipset %s: %w", s.Spec.Name, err)
		}
		inv.SetMembers[s.Spec.Name] = len(members)
	}
	return inv, nil
}

// Diff names every count that differs from want, or returns nil.
func (got Inventory) Diff(want Inventory) error {
	var errs []error
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"virtual servers", got.VirtualServers, want.VirtualServers},
		{"real servers", got.RealServers, want.RealServers},
		{"addresses on " + handles.DummyLink, got.Addresses, want.Addresses},
	} {
		if c.got != c.want {
			errs = append(errs, fmt.Errorf("%s: the kernel holds %d, want %d", c.what, c.got, c.want))
		}
	}
	names := slices.Sorted(maps.Keys(want.SetMembers))
	for _, name := range names {
		if g, w := got.SetMembers[name], want.SetMembers[name]; g != w {
			errs = append(errs, fmt.Errorf("ipset %s: the kernel holds %d members, want %d", name, g, w))
		}
	}
	return errors.Join(errs...)
}

// CheckService reads one virtual server's real servers back and compares
// them, weights included, with want's.
func CheckService(h Handles, want desired.Service) error {
	dests, err := h.IPVS.GetDestinations(handles.ToService(want.VirtualServer))
	if err != nil {
		return fmt.Errorf("reading back the real servers of %s: %w", want.Key, err)
	}
	got := make([]desired.RealServer, 0, len(dests))
	for _, d := range dests {
		rs, ok := handles.FromDestination(d)
		if !ok {
			return fmt.Errorf("%s: the kernel lists a real server without an address: %+v", want.Key, d)
		}
		got = append(got, rs)
	}
	byAddr := func(a, b desired.RealServer) int { return a.AddrPort().Compare(b.AddrPort()) }
	slices.SortFunc(got, byAddr)
	wantRS := slices.SortedFunc(slices.Values(want.RealServers), byAddr)
	if !slices.Equal(got, wantRS) {
		return fmt.Errorf("%s: the kernel holds real servers %v, want %v", want.Key, got, wantRS)
	}
	return nil
}

// ServiceOf returns the service want has for k.
func ServiceOf(want *desired.State, k desired.Key) (desired.Service, error) {
	i, found := slices.BinarySearchFunc(want.Services, k, func(s desired.Service, k desired.Key) int { return s.Key.Compare(k) })
	if !found {
		return desired.Service{}, fmt.Errorf("the desired state has no virtual server %s", k)
	}
	return want.Services[i], nil
}
