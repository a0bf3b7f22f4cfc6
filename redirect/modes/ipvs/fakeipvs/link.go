package fakeipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// Link is a fake handles.Link: a dummy link that may or may not exist.
type Link struct {
	Counter
	Hook Hook

	mu     sync.Mutex
	exists bool
	addrs  map[netip.Addr]bool
}

var _ handles.Link = (*Link)(nil)

func (l *Link) begin(op, target string) error {
	l.count(op)
	if l.Hook != nil {
		if err := l.Hook(op, target); err != nil {
			return fmt.Errorf("%s %s: %w", op, target, err)
		}
	}
	return nil
}

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
	if err := l.begin("Addrs", handles.DummyLink); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.exists {
		return nil, syscall.ENODEV
	}
	out := make([]netip.Addr, 0, len(l.addrs))
	for a := range l.addrs {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func (l *Link) AddAddr(a netip.Addr) error {
	if err := l.begin("AddAddr", a.String()); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.exists:
		return syscall.ENODEV
	case l.addrs[a]:
		return syscall.EEXIST
	}
	if l.addrs == nil {
		l.addrs = make(map[netip.Addr]bool)
	}
	l.addrs[a] = true
	return nil
}

func (l *Link) DelAddr(a netip.Addr) error {
	if err := l.begin("DelAddr", a.String()); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.exists:
		return syscall.ENODEV
	case !l.addrs[a]:
		return syscall.EADDRNOTAVAIL
	}
	delete(l.addrs, a)
	return nil
}

func (l *Link) DeleteLink() error {
	if err := l.begin("DeleteLink", handles.DummyLink); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.exists {
		return syscall.ENODEV
	}
	l.exists, l.addrs = false, nil
	return nil
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
