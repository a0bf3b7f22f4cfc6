package conntrack

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// NetlinkTable is the real Table, over ctnetlink. It keeps one netlink
// socket, so a pass that deletes thousands of flows does not open one per
// flow. It is not safe for concurrent use.
type NetlinkTable struct {
	handle *netlink.Handle
}

var _ Table = (*NetlinkTable)(nil)

// NewNetlinkTable opens a netfilter netlink socket in the calling thread's
// network namespace.
func NewNetlinkTable() (*NetlinkTable, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening a netfilter netlink socket for conntrack: %w", err)
	}
	return &NetlinkTable{handle: h}, nil
}

// Delete implements Table: one dump of the family's table, and one delete
// request, on the same socket, per selected flow.
func (t *NetlinkTable) Delete(req *Request) (int, error) {
	n, err := t.handle.ConntrackDeleteFilters(netlink.ConntrackTable, inetFamily(req.Family), netlinkMatcher{req.Matcher()})
	if err != nil {
		return int(n), fmt.Errorf("deleting %s conntrack flows (%d deleted): %w", req.Family, n, err)
	}
	return int(n), nil
}

// Close closes the socket.
func (t *NetlinkTable) Close() error {
	t.handle.Close()
	return nil
}

func inetFamily(f ipfamily.Family) netlink.InetFamily {
	if f == ipfamily.IPv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// netlinkMatcher adapts a Matcher to netlink's filter interface.
type netlinkMatcher struct{ m *Matcher }

func (n netlinkMatcher) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	return n.m.Match(FlowOf(f))
}

// FlowOf converts a flow as netlink parses it.
func FlowOf(f *netlink.ConntrackFlow) Flow {
	return Flow{
		Protocol: Protocol(f.Forward.Protocol),
		OrigSrc:  addrPort(f.Forward.SrcIP, f.Forward.SrcPort),
		OrigDst:  addrPort(f.Forward.DstIP, f.Forward.DstPort),
		ReplySrc: addrPort(f.Reverse.SrcIP, f.Reverse.SrcPort),
	}
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}
