package cleanup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The nftables tables and ipsets cleanup removes, reached over netfilter
// netlink rather than with the nft and ipset tools, so a node without those
// tools is cleaned as well.

// IPSets is the ipset surface cleanup needs.
type IPSets interface {
	// Names lists every set; none where the kernel has no ip_set.
	Names() ([]string, error)
	// Destroy destroys a set; a set still referenced by a rule is
	// IPSET_ERR_BUSY (an nl.IPSetError); a missing one is no error.
	Destroy(name string) error
}

// netlinkIPSets is the real IPSets.
type netlinkIPSets struct{}

// ipsetFlagListSetname is IPSET_FLAG_LIST_SETNAME (linux/netfilter/ipset/
// ip_set.h): list names only, as `ipset list -n` does.
const ipsetFlagListSetname = 1 << 1

// Names asks for names only: a full listing would carry every member of
// every set (and the netlink package logs the attributes it does not know).
func (netlinkIPSets) Names() ([]string, error) {
	req := nl.NewNetlinkRequest(nl.IPSET_CMD_LIST|unix.NFNL_SUBSYS_IPSET<<8, nl.GetIpsetFlags(nl.IPSET_CMD_LIST))
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_INET, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FLAGS, binary.BigEndian.AppendUint32(nil, ipsetFlagListSetname)))
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if noSubsystem(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing ipsets over netlink: %w", ipsetError(err))
	}
	var names []string
	for _, msg := range msgs {
		if len(msg) < nl.SizeofNfgenmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
		if err != nil {
			return nil, fmt.Errorf("reading the kernel's list of ipsets: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == nl.IPSET_ATTR_SETNAME {
				names = append(names, string(trimNUL(a.Value)))
			}
		}
	}
	return names, nil
}

func (netlinkIPSets) Destroy(name string) error {
	return ipsetError(netlink.IpsetDestroy(name))
}

// ipsetError gives ipset's private error codes their names, and the one
// cleanup meets its cause.
func ipsetError(err error) error {
	var code nl.IPSetError
	var errno syscall.Errno
	switch {
	case errors.As(err, &code): // the netlink package's own requests
	case errors.As(err, &errno) && errno >= nl.IPSET_ERR_PRIVATE:
		code = nl.IPSetError(errno)
	default:
		return err
	}
	if code == nl.IPSET_ERR_BUSY {
		return fmt.Errorf("%w: the set is in use by a kernel component (a rule still matches it)", code)
	}
	return code
}

// NFTable names one nftables table.
type NFTable struct {
	Family string // as nft spells it: "ip", "ip6", "inet", ...
	Name   string
}

func (t NFTable) String() string { return t.Family + " " + t.Name }

// NFTables is the nftables surface cleanup needs. The real one talks
// nf_tables netlink itself, so cleanup needs no nft tool on the node.
type NFTables interface {
	// Tables lists every table; none where the kernel has no nf_tables.
	Tables() ([]NFTable, error)
	// DeleteTable deletes a table with everything in it.
	DeleteTable(t NFTable) error
}

// nftFamilies maps nf_tables' family numbers to nft's names.
var nftFamilies = map[uint8]string{
	unix.NFPROTO_INET:   "inet",
	unix.NFPROTO_IPV4:   "ip",
	unix.NFPROTO_ARP:    "arp",
	unix.NFPROTO_NETDEV: "netdev",
	unix.NFPROTO_BRIDGE: "bridge",
	unix.NFPROTO_IPV6:   "ip6",
}

func nftFamily(name string) (uint8, bool) {
	for num, n := range nftFamilies {
		if n == name {
			return num, true
		}
	}
	return 0, false
}

// netlinkNFTables is the real NFTables.
type netlinkNFTables struct{}

// noSubsystem reports whether err means the kernel has no such netfilter
// subsystem to ask: no nfnetlink at all (EPROTONOSUPPORT), or no nf_tables
// or ip_set behind it that could be loaded (EINVAL, EOPNOTSUPP).
func noSubsystem(err error) bool {
	return errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)
}

func (netlinkNFTables) Tables() ([]NFTable, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETTABLE, unix.NLM_F_DUMP)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.NFPROTO_UNSPEC, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if noSubsystem(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables over netlink: %w", err)
	}
	var tables []NFTable
	for _, msg := range msgs {
		if len(msg) < nl.SizeofNfgenmsg {
			continue
		}
		fam, ok := nftFamilies[msg[0]]
		if !ok {
			fam = fmt.Sprintf("family-%d", msg[0])
		}
		attrs, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
		if err != nil {
			return nil, fmt.Errorf("reading the kernel's list of nftables tables: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == unix.NFTA_TABLE_NAME {
				tables = append(tables, NFTable{Family: fam, Name: string(trimNUL(a.Value))})
			}
		}
	}
	return tables, nil
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// DeleteTable sends NFT_MSG_DELTABLE in a batch, as nf_tables takes changes
// only inside one, and waits for its acknowledgement.
func (netlinkNFTables) DeleteTable(t NFTable) error {
	fam, ok := nftFamily(t.Family)
	if !ok {
		return fmt.Errorf("deleting nftables table %s: unknown family %q", t, t.Family)
	}
	batch := func(typ int) []byte {
		req := nl.NewNetlinkRequest(typ, 0)
		// The batch messages carry the subsystem in res_id (big-endian).
		msg := &nl.Nfgenmsg{NfgenFamily: unix.NFPROTO_UNSPEC, Version: nl.NFNETLINK_V0}
		b := msg.Serialize()
		binary.BigEndian.PutUint16(b[2:], unix.NFNL_SUBSYS_NFTABLES)
		req.AddRawData(b)
		return req.Serialize()
	}
	del := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_DELTABLE, unix.NLM_F_ACK)
	del.AddData(&nl.Nfgenmsg{NfgenFamily: fam, Version: nl.NFNETLINK_V0})
	del.AddData(nl.NewRtAttr(unix.NFTA_TABLE_NAME, nl.ZeroTerminated(t.Name)))
	var payload []byte
	payload = append(payload, batch(unix.NFNL_MSG_BATCH_BEGIN)...)
	payload = append(payload, del.Serialize()...)
	payload = append(payload, batch(unix.NFNL_MSG_BATCH_END)...)
	if err := sendAndAck(payload, del.Seq); err != nil {
		return fmt.Errorf("deleting nftables table %s: %w", t, err)
	}
	return nil
}

// sendAndAck sends one datagram of netlink messages on a new netfilter
// socket and returns the error the kernel answered any of them with, or nil
// once it acknowledged message seq.
func sendAndAck(payload []byte, seq uint32) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("opening a netfilter netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("binding a netfilter netlink socket: %w", err)
	}
	// The kernel answers at once; never hang cleanup on a lost answer.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
		return fmt.Errorf("setting a receive timeout: %w", err)
	}
	if err := unix.Sendto(fd, payload, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, unix.Getpagesize())
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("reading the kernel's answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("reading the kernel's answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
				return syscall.Errno(-code)
			}
			if m.Header.Seq == seq {
				return nil
			}
		}
	}
}
