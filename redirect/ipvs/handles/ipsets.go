package handles

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/ipvs/desired"
	"kproxy.dev/kproxy/redirect/kernel"
)

// NetlinkIPSets is the real IPSets, over netlink (no ipset binary).
type NetlinkIPSets struct{}

func (NetlinkIPSets) Create(spec desired.SetSpec) error {
	opts := netlink.IpsetCreateOptions{Family: unix.AF_INET}
	if spec.Family == kernel.IPv6 {
		opts.Family = unix.AF_INET6
	}
	if spec.Type == desired.BitmapPort {
		opts.PortFrom, opts.PortTo = 0, 65535
	}
	return netlink.IpsetCreate(spec.Name, spec.Type, opts)
}

func (NetlinkIPSets) Destroy(name string) error { return netlink.IpsetDestroy(name) }

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
	if isBarePort(e) {
		return portEntry(nl.IPSET_CMD_ADD, name, e.Port)
	}
	ne, err := toNetlink(e)
	if err != nil {
		return err
	}
	return netlink.IpsetAdd(name, ne)
}

func (NetlinkIPSets) Del(name string, e desired.Entry) error {
	if isBarePort(e) {
		return portEntry(nl.IPSET_CMD_DEL, name, e.Port)
	}
	ne, err := toNetlink(e)
	if err != nil {
		return err
	}
	return netlink.IpsetDel(name, ne)
}

// isBarePort says whether e is a bitmap:port member: a port alone.
func isBarePort(e desired.Entry) bool {
	return !e.IP.IsValid() && !e.IP2.IsValid() && !e.Net.IsValid() && e.Protocol == ""
}

// portEntry adds or deletes a bitmap:port member. The netlink package
// always sends a protocol attribute with a port, which bitmap:port rejects
// ("invalid protocol", IPSET_ERR_PROTOCOL), so this request carries the
// port alone, as the ipset tool's does.
func portEntry(cmd int, set string, port uint16) error {
	req := nl.NewNetlinkRequest(cmd|unix.NFNL_SUBSYS_IPSET<<8, nl.GetIpsetFlags(cmd)|unix.NLM_F_EXCL)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_INET, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(set)))
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT|int(nl.NLA_F_NET_BYTEORDER), binary.BigEndian.AppendUint16(nil, port)))
	req.AddData(data)
	_, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	var errno syscall.Errno
	if errors.As(err, &errno) && errno >= nl.IPSET_ERR_PRIVATE {
		return nl.IPSetError(errno)
	}
	return err
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
