package cleanup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

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

// noNFTables reports whether err means the kernel has no nf_tables to
// ask: no nfnetlink at all, or no nf_tables subsystem behind it (and none
// could be loaded).
func noNFTables(err error) bool {
	return errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)
}

func (netlinkNFTables) Tables() ([]NFTable, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETTABLE, unix.NLM_F_DUMP)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.NFPROTO_UNSPEC, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if noNFTables(err) {
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
