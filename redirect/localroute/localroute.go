// Package localroute makes service addresses local to the node without
// netfilter: one route of type local in the kernel's local table per address
// (`ip route add local 198.18.0.10/32 dev lo table local proto 107`), so the
// node delivers packets for the address to sockets bound to it. The
// userspace mode's local portals listen on such addresses.
//
// The routes carry their own protocol number, which is how kproxy tells its
// routes from everyone else's: Sync and cleanup only ever delete routes
// with that number, and never add one for an address the node already has.
package localroute

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Protocol is the route protocol (rtm_protocol) of kproxy's local routes:
// unassigned in iproute2's rt_protos, so `ip route show table local proto
// 107` lists exactly them.
const Protocol = 107

// Routes is the kernel surface: the local routes carrying Protocol.
type Routes interface {
	// List returns the addresses of fam with a local route of Protocol.
	List(fam ipfamily.Family) ([]netip.Addr, error)
	// Add adds a local route for addr; syscall.EEXIST when the local
	// table already has a route for it (kproxy's or anyone's).
	Add(addr netip.Addr) error
	// Delete removes kproxy's local route for addr; syscall.ESRCH when
	// there is none.
	Delete(addr netip.Addr) error
}

// Sync makes the addresses with a kproxy route exactly want, except for
// addresses in nodeAddrs, which are local already (an externalIP that is one
// of the node's): they get no route, and a route kproxy added for one before
// it became the node's is removed. Every address is tried; the error joins
// the failures, each naming its address.
func Sync(r Routes, want, nodeAddrs []netip.Addr) error {
	return NewTable(r).Sync(want, nodeAddrs, true)
}

// Table is Sync with a memory of what its last sync left: a sync that does
// not verify touches the kernel only for the addresses that changed, where
// Sync lists every kproxy route first (at 10,000 services that dump was a
// quarter of the userspace mode's sync).
type Table struct {
	routes Routes
	// local holds the addresses the last sync left local, through kproxy's
	// route or another's; nil when nothing is known (no sync yet, or the
	// last one failed somewhere).
	local map[netip.Addr]bool
	// lastNode are the node addresses of the last sync: Update needs the
	// same, as an address that became the node's must lose its route.
	lastNode []netip.Addr
}

// NewTable returns a Table that knows nothing yet: its first sync lists.
func NewTable(r Routes) *Table { return &Table{routes: r} }

// Sync is the package's Sync. With verify false it trusts what its last
// sync left, so a route someone else deleted since comes back at the next
// verifying sync (the modes verify on full and periodic syncs).
func (t *Table) Sync(want, nodeAddrs []netip.Addr, verify bool) error {
	wanted := map[netip.Addr]bool{}
	for _, a := range want {
		a = a.Unmap()
		if !slices.Contains(nodeAddrs, a) {
			wanted[a] = true
		}
	}
	have, errs := t.local, []error(nil)
	if verify || have == nil {
		have, errs = t.list()
	}
	for a := range have {
		if wanted[a] {
			continue
		}
		if err := t.routes.Delete(a); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("deleting the local route for %s: %w", a, err))
		}
	}
	for a := range wanted {
		if have[a] {
			continue
		}
		switch err := t.routes.Add(a); {
		case err == nil:
		case errors.Is(err, syscall.EEXIST):
			// Someone else's route makes the address local already; it is
			// theirs to keep, and it serves the portal as well as ours.
		default:
			errs = append(errs, fmt.Errorf("adding a local route for %s: %w", a, err))
		}
	}
	t.local, t.lastNode = wanted, slices.Clone(nodeAddrs)
	if len(errs) > 0 {
		t.local = nil
	}
	return errors.Join(errs...)
}

// Update is Sync given how want changed since the last sync: the addresses
// that became wanted and those no longer wanted (each named once, however
// many services share it). It needs the last sync's record and the same
// node addresses; without them it does nothing and reports false, and the
// caller syncs in full. Its cost follows the change, not the table.
func (t *Table) Update(add, del, nodeAddrs []netip.Addr) (bool, error) {
	if t.local == nil || !slices.Equal(nodeAddrs, t.lastNode) {
		return false, nil
	}
	var errs []error
	for _, a := range del {
		a = a.Unmap()
		if !t.local[a] {
			continue
		}
		if err := t.routes.Delete(a); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("deleting the local route for %s: %w", a, err))
		}
		delete(t.local, a)
	}
	for _, a := range add {
		a = a.Unmap()
		if t.local[a] || slices.Contains(nodeAddrs, a) {
			continue
		}
		switch err := t.routes.Add(a); {
		case err == nil, errors.Is(err, syscall.EEXIST):
		default:
			errs = append(errs, fmt.Errorf("adding a local route for %s: %w", a, err))
		}
		t.local[a] = true
	}
	if len(errs) > 0 {
		t.local = nil
	}
	return true, errors.Join(errs...)
}

// list returns the addresses with a kproxy route, in both families.
func (t *Table) list() (map[netip.Addr]bool, []error) {
	have := map[netip.Addr]bool{}
	var errs []error
	for _, fam := range ipfamily.All() {
		addrs, err := t.routes.List(fam)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing %s local routes: %w", fam, err))
			continue
		}
		for _, a := range addrs {
			have[a] = true
		}
	}
	return have, errs
}

// Clean deletes every local route of Protocol in both families.
func Clean(r Routes) error { return Sync(r, nil, nil) }
