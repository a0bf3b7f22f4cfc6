package handles

import (
	"encoding/binary"
	"errors"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The few ipset requests NetlinkIPSets builds itself, where the netlink
// package's differ from what the ipset tool sends.

// ipsetRequest starts a request on set with NLM_F_EXCL, which makes the
// kernel report what already is (a present member, a missing set) as an
// error instead of ignoring it, as the ipset tool does without -exist.
func ipsetRequest(cmd int, set string) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(cmd|unix.NFNL_SUBSYS_IPSET<<8, nl.GetIpsetFlags(cmd)|unix.NLM_F_EXCL)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_INET, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(set)))
	return req
}

// executeIPSet runs req, turning ipset's private error codes into
// nl.IPSetError as the netlink package does.
func executeIPSet(req *nl.NetlinkRequest) error {
	_, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	var errno syscall.Errno
	if errors.As(err, &errno) && errno >= nl.IPSET_ERR_PRIVATE {
		return nl.IPSetError(errno)
	}
	return err
}

// portEntry adds or deletes a bitmap:port member. The netlink package
// always sends a protocol attribute with a port, which bitmap:port rejects
// ("invalid protocol", IPSET_ERR_PROTOCOL), so this request carries the
// port alone, as the ipset tool's does.
func portEntry(cmd int, set string, port uint16) error {
	req := ipsetRequest(cmd, set)
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT|int(nl.NLA_F_NET_BYTEORDER), binary.BigEndian.AppendUint16(nil, port)))
	req.AddData(data)
	return executeIPSet(req)
}
