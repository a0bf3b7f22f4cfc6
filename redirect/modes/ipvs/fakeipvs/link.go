package fakeipvs

import (
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// Link is a fake handles.Link: a dummy link that may or may not exist.
type Link struct {
	Calls

	mu     sync.Mutex
	exists bool
	addrs  map[netip.Addr]bool
}

var _ handles.Link = (*Link)(nil)

func (l *Link) EnsureLink() error {
	if err := l.begin("EnsureLink", handles.DummyLink); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exists = true
	return nil
}

func (l *Link) Addrs() ([]netip.Addr, error) {
	var out []netip.Addr
	err := l.onExisting("Addrs", handles.DummyLink, func() error {
		out = make([]netip.Addr, 0, len(l.addrs))
		for a := range l.addrs {
			out = append(out, a)
		}
		slices.SortFunc(out, netip.Addr.Compare)
		return nil
	})
	return out, err
}

func (l *Link) AddAddr(a netip.Addr) error {
	return l.onExisting("AddAddr", a.String(), func() error {
		if l.addrs[a] {
			return syscall.EEXIST
		}
		if l.addrs == nil {
			l.addrs = make(map[netip.Addr]bool)
		}
		l.addrs[a] = true
		return nil
	})
}

func (l *Link) DelAddr(a netip.Addr) error {
	return l.onExisting("DelAddr", a.String(), func() error {
		if !l.addrs[a] {
			return syscall.EADDRNOTAVAIL
		}
		delete(l.addrs, a)
		return nil
	})
}

func (l *Link) DeleteLink() error {
	return l.onExisting("DeleteLink", handles.DummyLink, func() error {
		l.exists, l.addrs = false, nil
		return nil
	})
}

// onExisting counts and hooks op on target, then, under the lock, runs
// apply if the link exists (ENODEV otherwise).
func (l *Link) onExisting(op, target string, apply func() error) error {
	if err := l.begin(op, target); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.exists {
		return syscall.ENODEV
	}
	return apply()
}

// Exists reports whether the link exists.
func (l *Link) Exists() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exists
}

// Family returns l as one family's handle sees it. The kernel's handles
// (handles.NetlinkLink, one per family over the same link) list only their
// own family's addresses; l itself lists every family's.
func (l *Link) Family(ipv6 bool) handles.Link { return familyLink{Link: l, ipv6: ipv6} }

type familyLink struct {
	*Link
	ipv6 bool
}

func (f familyLink) Addrs() ([]netip.Addr, error) {
	all, err := f.Link.Addrs()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(a netip.Addr) bool { return a.Is6() != f.ipv6 }), nil
}
