package fakeipvs

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/moby/ipvs"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

func sortedKeys(m map[desired.Key]*fakeService) []desired.Key {
	return slices.SortedFunc(maps.Keys(m), desired.Key.Compare)
}

func sortedAddrPorts(m map[netip.AddrPort]*ipvs.Destination) []netip.AddrPort {
	return slices.SortedFunc(maps.Keys(m), netip.AddrPort.Compare)
}

func sortedNames(m map[string]*fakeSet) []string { return slices.Sorted(maps.Keys(m)) }

func sortedEntries(m map[desired.Entry]bool) []desired.Entry {
	return slices.SortedFunc(maps.Keys(m), desired.Entry.Compare)
}

// peek lists the link's addresses without counting a call.
func (l *Link) peek() ([]netip.Addr, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.SortedFunc(maps.Keys(l.addrs), netip.Addr.Compare), l.exists
}
