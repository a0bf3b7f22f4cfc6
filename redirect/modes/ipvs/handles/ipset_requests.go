package handles

import (
	"encoding/binary"
	"errors"
	"fmt"
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

// newestRevision asks the kernel for the newest revision of set type typ
// in family (IPSET_CMD_TYPE), as the ipset tool does before it creates a
// set. The netlink package otherwise creates the oldest revision, which
// lacks later features (bucketsize among them) and lists differently from
// the sets kube-proxy makes with the tool.
func newestRevision(typ string, family uint8) (uint8, error) {
	req := nl.NewNetlinkRequest(nl.IPSET_CMD_TYPE|unix.NFNL_SUBSYS_IPSET<<8, nl.GetIpsetFlags(nl.IPSET_CMD_TYPE))
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_TYPENAME, nl.ZeroTerminated(typ)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FAMILY, nl.Uint8Attr(family)))
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil {
		return 0, fmt.Errorf("asking the kernel for ipset type %s: %w", typ, err)
	}
	for _, msg := range msgs {
		if len(msg) < nl.SizeofNfgenmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
		if err != nil {
			return 0, fmt.Errorf("reading the kernel's answer for ipset type %s: %w", typ, err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == nl.IPSET_ATTR_REVISION && len(a.Value) == 1 {
				return a.Value[0], nil
			}
		}
	}
	return 0, fmt.Errorf("the kernel's answer for ipset type %s names no revision", typ)
}
