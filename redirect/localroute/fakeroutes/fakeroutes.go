// Package fakeroutes is an in-memory localroute.Routes that fails as the
// kernel does: adding a route the local table has is EEXIST, deleting one
// it lacks is ESRCH, and a node address counts as having a (foreign) route.
package fakeroutes

import (
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Routes is the fake local table.
type Routes struct {
	mu      sync.Mutex
	ours    map[netip.Addr]bool
	foreign map[netip.Addr]bool
	fail    map[netip.Addr]error
	lists   int
}

// New returns a table where the foreign addresses (the node's own) already
// have local routes that are not kproxy's.
func New(foreign ...netip.Addr) *Routes {
	r := &Routes{ours: map[netip.Addr]bool{}, foreign: map[netip.Addr]bool{}, fail: map[netip.Addr]error{}}
	for _, a := range foreign {
		r.foreign[a] = true
	}
	return r
}

// FailAdd makes adding a route for addr fail with err.
func (r *Routes) FailAdd(addr netip.Addr, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail[addr] = err
}

// Ours returns kproxy's routes, sorted.
func (r *Routes) Ours() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []netip.Addr
	for a := range r.ours {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// Lists counts the List calls so far.
func (r *Routes) Lists() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists
}

func (r *Routes) List(fam ipfamily.Family) ([]netip.Addr, error) {
	r.mu.Lock()
	r.lists++
	r.mu.Unlock()
	var out []netip.Addr
	for _, a := range r.Ours() {
		if ipfamily.Of(a) == fam {
			out = append(out, a)
		}
	}
	return out, nil
}

func (r *Routes) Add(addr netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fail[addr]; err != nil {
		return err
	}
	if r.ours[addr] || r.foreign[addr] {
		return syscall.EEXIST
	}
	r.ours[addr] = true
	return nil
}

func (r *Routes) Delete(addr netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ours[addr] {
		return syscall.ESRCH
	}
	delete(r.ours, addr)
	return nil
}
