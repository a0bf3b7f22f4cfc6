package handles

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// NetlinkIPSets is the real IPSets, over netlink (no ipset binary).
type NetlinkIPSets struct{}

func (NetlinkIPSets) Create(spec desired.SetSpec) error {
	opts := netlink.IpsetCreateOptions{Family: unix.AF_INET}
	if spec.Family == ipfamily.IPv6 {
		opts.Family = unix.AF_INET6
	}
	if spec.Type == desired.BitmapPort {
		opts.PortFrom, opts.PortTo = 0, 65535
	}
	rev, err := newestRevision(spec.Type, opts.Family)
	if err != nil {
		return fmt.Errorf("creating ipset %s: %w", spec.Name, err)
	}
	opts.Revision = rev
	return netlink.IpsetCreate(spec.Name, spec.Type, opts)
}

// Destroy sends its own request: the netlink package's omits NLM_F_EXCL,
// which the kernel takes as ipset's -exist and destroys a missing set
// without error (seen on 6.1 and 6.18). With it, a missing set is ENOENT,
// as the IPSets contract says.
func (NetlinkIPSets) Destroy(name string) error {
	return executeIPSet(ipsetRequest(nl.IPSET_CMD_DESTROY, name))
}

func (NetlinkIPSets) List(name string) ([]desired.Entry, error) {
	res, err := netlink.IpsetList(name)
	if err != nil {
		return nil, err
	}
	out := make([]desired.Entry, 0, len(res.Entries))
	for _, e := range res.Entries {
		out = append(out, fromNetlink(res.TypeName, e))
	}
	return out, nil
}

func (NetlinkIPSets) Add(name string, e desired.Entry) error {
	return editMember(name, e, nl.IPSET_CMD_ADD, netlink.IpsetAdd)
}

func (NetlinkIPSets) Del(name string, e desired.Entry) error {
	return editMember(name, e, nl.IPSET_CMD_DEL, netlink.IpsetDel)
}

// editMember adds or deletes e in set name: a bare port (bitmap:port) in
// portEntry's request for cmd, any other member through send, the netlink
// package's request.
func editMember(name string, e desired.Entry, cmd int, send func(string, *netlink.IPSetEntry) error) error {
	if isBarePort(e) {
		return portEntry(cmd, name, e.Port)
	}
	ne, err := toNetlink(e)
	if err != nil {
		return err
	}
	return send(name, ne)
}

// isBarePort says whether e is a bitmap:port member: a port alone.
func isBarePort(e desired.Entry) bool {
	return !e.IP.IsValid() && !e.IP2.IsValid() && !e.Net.IsValid() && e.Protocol == ""
}

var protoNumbers = map[v1.Protocol]uint8{v1.ProtocolTCP: unix.IPPROTO_TCP, v1.ProtocolUDP: unix.IPPROTO_UDP, v1.ProtocolSCTP: unix.IPPROTO_SCTP}

func toNetlink(e desired.Entry) (*netlink.IPSetEntry, error) {
	port := e.Port
	ne := &netlink.IPSetEntry{Port: &port}
	if e.IP.IsValid() {
		ne.IP = e.IP.AsSlice()
		if e.Protocol == "" {
			ne.Port = nil // hash:ip
		}
	}
	if e.Protocol != "" {
		n, ok := protoNumbers[e.Protocol]
		if !ok {
			return nil, fmt.Errorf("set entry %s: unknown protocol %q", e, e.Protocol)
		}
		ne.Protocol = &n
	}
	switch {
	case e.IP2.IsValid():
		ne.IP2 = e.IP2.AsSlice()
	case e.Net.IsValid() && e.Net.Bits() == 0:
		// The netlink package leaves a zero CIDR out, and the kernel then
		// stores a host address (0.0.0.0/32): refuse as the kernel
		// refuses a zero prefix it is given.
		return nil, fmt.Errorf("set entry %s: %w", e, nl.IPSetError(nl.IPSET_ERR_INVALID_CIDR))
	case e.Net.IsValid():
		ne.IP2, ne.CIDR2 = e.Net.Addr().AsSlice(), uint8(e.Net.Bits())
	}
	return ne, nil
}

func fromNetlink(typ string, ne netlink.IPSetEntry) desired.Entry {
	var e desired.Entry
	if ne.Port != nil {
		e.Port = *ne.Port
	}
	if ip, ok := netip.AddrFromSlice(ne.IP); ok {
		e.IP = ip.Unmap()
	}
	if ne.Protocol != nil && typ != desired.BitmapPort {
		for name, n := range protoNumbers {
			if n == *ne.Protocol {
				e.Protocol = name
			}
		}
	}
	if ip2, ok := netip.AddrFromSlice(ne.IP2); ok {
		if typ == desired.HashIPPortNet {
			e.Net = netip.PrefixFrom(ip2.Unmap(), int(ne.CIDR2))
		} else {
			e.IP2 = ip2.Unmap()
		}
	}
	return e
}
