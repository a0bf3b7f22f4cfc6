package handles

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkLink is the real Link for one family's addresses on DummyLink.
type NetlinkLink struct {
	Name string
	IPv6 bool
}

// NewLink returns the real kube-ipvs0 for one family.
func NewLink(ipv6 bool) *NetlinkLink { return &NetlinkLink{Name: DummyLink, IPv6: ipv6} }

func (l *NetlinkLink) link() (netlink.Link, error) {
	link, err := netlink.LinkByName(l.Name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, fmt.Errorf("link %s: %w", l.Name, unix.ENODEV)
	}
	return link, err
}

func (l *NetlinkLink) EnsureLink() error {
	if _, err := l.link(); err == nil {
		return nil
	}
	err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: l.Name}})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating dummy link %s: %w", l.Name, err)
	}
	return nil
}

func (l *NetlinkLink) family() int {
	if l.IPv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func (l *NetlinkLink) Addrs() ([]netip.Addr, error) {
	link, err := l.link()
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

// hostAddr is a as a host route: /32 or /128, as kube-proxy binds VIPs.
func hostAddr(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}}
}

func (l *NetlinkLink) AddAddr(a netip.Addr) error {
	link, err := l.link()
	if err != nil {
		return err
	}
	return netlink.AddrAdd(link, hostAddr(a))
}

func (l *NetlinkLink) DelAddr(a netip.Addr) error {
	link, err := l.link()
	if err != nil {
		return err
	}
	return netlink.AddrDel(link, hostAddr(a))
}

func (l *NetlinkLink) DeleteLink() error {
	link, err := l.link()
	if err != nil {
		return err
	}
	return netlink.LinkDel(link)
}
