package handles

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkLink is the real Link for one family's addresses on DummyLink.
//
// It remembers the link's index, so that binding or unbinding an address
// is one netlink request rather than a lookup by name and the request.
// The kernel answers ENODEV for an index it does not know: the link was
// deleted, perhaps recreated under another index. The handle then looks
// the link up by name again and retries once. (The kernel hands out
// indexes in increasing order, so a stale one does not name another
// device unless someone picks that index on purpose.) Listing addresses
// and deleting the link always look the link up by name: the first
// filters by index, where a stale one would list nothing, and the second
// must never delete anything else.
type NetlinkLink struct {
	Name string
	IPv6 bool
	// index is the link's index as last looked up; 0 when unknown.
	index atomic.Int32
}

// NewLink returns the real kube-ipvs0 for one family.
func NewLink(ipv6 bool) *NetlinkLink { return &NetlinkLink{Name: DummyLink, IPv6: ipv6} }

// lookup finds the link by name and remembers its index.
func (l *NetlinkLink) lookup() (netlink.Link, error) {
	link, err := netlink.LinkByName(l.Name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		l.index.Store(0)
		return nil, fmt.Errorf("link %s: %w", l.Name, unix.ENODEV)
	case err != nil:
		return nil, fmt.Errorf("looking up link %s: %w", l.Name, err)
	}
	l.index.Store(int32(link.Attrs().Index))
	return link, nil
}

// onIndex runs op with the link's index: the remembered one, then, if
// there is none or the kernel does not know it, the one a lookup finds.
func (l *NetlinkLink) onIndex(op func(index int) error) error {
	if index := int(l.index.Load()); index != 0 {
		err := op(index)
		if !errors.Is(err, unix.ENODEV) {
			return err
		}
		l.index.CompareAndSwap(int32(index), 0)
	}
	link, err := l.lookup()
	if err != nil {
		return err
	}
	return op(link.Attrs().Index)
}

func (l *NetlinkLink) EnsureLink() error {
	if _, err := l.lookup(); err == nil {
		return nil
	}
	dummy := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: l.Name}}
	err := netlink.LinkAdd(dummy)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating dummy link %s: %w", l.Name, err)
	}
	// LinkAdd looks the new link up for its index; 0 if that failed.
	l.index.Store(int32(dummy.Attrs().Index))
	return nil
}

func (l *NetlinkLink) family() int {
	if l.IPv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func (l *NetlinkLink) Addrs() ([]netip.Addr, error) {
	link, err := l.lookup()
	if err != nil {
		return nil, err
	}
	list, err := netlink.AddrList(link, l.family())
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", l.Name, err)
	}
	out := make([]netip.Addr, 0, len(list))
	for _, a := range list {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// hostAddr is a as a host route on the link with index: /32 or /128, as
// kube-proxy binds VIPs.
func hostAddr(a netip.Addr, index int) *netlink.Addr {
	return &netlink.Addr{
		IPNet:     &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())},
		LinkIndex: index,
	}
}

func (l *NetlinkLink) AddAddr(a netip.Addr) error {
	// A nil link makes the netlink package use the address's LinkIndex.
	return l.onIndex(func(index int) error { return netlink.AddrAdd(nil, hostAddr(a, index)) })
}

func (l *NetlinkLink) DelAddr(a netip.Addr) error {
	return l.onIndex(func(index int) error { return netlink.AddrDel(nil, hostAddr(a, index)) })
}

func (l *NetlinkLink) DeleteLink() error {
	link, err := l.lookup()
	if err != nil {
		return err
	}
	l.index.Store(0)
	return netlink.LinkDel(link)
}
