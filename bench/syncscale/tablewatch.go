package syncscale

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/redirect/kernel"
)

// NATVersion reads, in a few microseconds whatever the rule count, a value
// that changes whenever a backend's IPv4 nat table is rewritten. Listing a
// chain with iptables costs far more on large tables (the tools read every
// chain, the legacy one the whole table), so a poller waits for the
// version to move and only then lists the chain.
type NATVersion interface {
	Read() (string, error)
	Close() error
}

// OpenNATVersion opens the backend's version source in the calling
// process's network namespace: nf_tables' ruleset generation, or for
// legacy the nat table's entry count and size. Only open the row's own
// backend: reading the legacy nat table creates it.
func OpenNATVersion(b kernel.Backend) (NATVersion, error) {
	if b == kernel.NFT {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return nil, fmt.Errorf("opening a netfilter netlink socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("binding a netfilter netlink socket: %w", err)
		}
		return &nftGeneration{fd: fd}, nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("opening a raw socket for the legacy nat table: %w", err)
	}
	return &legacyTableInfo{fd: fd}, nil
}

// sizeofNfgenmsg is the size of struct nfgenmsg, which follows the netlink
// header of every nf_tables message.
const sizeofNfgenmsg = 4

// nftGeneration asks nf_tables for its ruleset generation, which every
// committed transaction increments.
type nftGeneration struct {
	fd  int
	seq uint32
}

func (g *nftGeneration) Read() (string, error) {
	g.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+sizeofNfgenmsg)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETGEN)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], g.seq)
	req[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC
	req[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	if err := unix.Sendto(g.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return "", fmt.Errorf("asking nf_tables for its generation: %w", err)
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(g.fd, buf, 0)
		if err != nil {
			return "", fmt.Errorf("reading nf_tables' generation: %w", err)
		}
		for msg := buf[:n]; len(msg) >= unix.NLMSG_HDRLEN; {
			length := int(binary.NativeEndian.Uint32(msg[0:]))
			if length < unix.NLMSG_HDRLEN || length > len(msg) {
				return "", fmt.Errorf("nf_tables' generation reply: bad message length %d", length)
			}
			typ, seq := binary.NativeEndian.Uint16(msg[4:]), binary.NativeEndian.Uint32(msg[8:])
			body := msg[unix.NLMSG_HDRLEN:length]
			msg = msg[min(align4(length), len(msg)):]
			switch {
			case seq != g.seq:
				// A reply to an earlier, abandoned request.
			case typ == unix.NLMSG_ERROR:
				if len(body) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(body)); errno != 0 {
						return "", fmt.Errorf("nf_tables' generation: %w", unix.Errno(-errno))
					}
				}
			default:
				return parseGeneration(body)
			}
		}
	}
}

// parseGeneration finds NFTA_GEN_ID (big-endian) in a NEWGEN message body:
// struct nfgenmsg, then netlink attributes.
func parseGeneration(body []byte) (string, error) {
	if len(body) < sizeofNfgenmsg {
		return "", errors.New("nf_tables' generation reply is too short")
	}
	for attrs := body[sizeofNfgenmsg:]; len(attrs) >= unix.SizeofNlAttr; {
		length := int(binary.NativeEndian.Uint16(attrs[0:]))
		typ := binary.NativeEndian.Uint16(attrs[2:]) &^ unix.NLA_F_NESTED
		if length < unix.SizeofNlAttr || length > len(attrs) {
			break
		}
		if typ == unix.NFTA_GEN_ID && length == unix.SizeofNlAttr+4 {
			return fmt.Sprintf("generation %d", binary.BigEndian.Uint32(attrs[unix.SizeofNlAttr:])), nil
		}
		attrs = attrs[min(align4(length), len(attrs)):]
	}
	return "", errors.New("nf_tables' generation reply has no generation id")
}

func align4(n int) int { return (n + 3) &^ 3 }

func (g *nftGeneration) Close() error { return unix.Close(g.fd) }

// iptGetinfo is the kernel's struct ipt_getinfo.
type iptGetinfo struct {
	name       [32]byte
	validHooks uint32
	hookEntry  [5]uint32
	underflow  [5]uint32
	numEntries uint32
	size       uint32
}

// iptSoGetInfo is IPT_SO_GET_INFO (IPT_BASE_CTL).
const iptSoGetInfo = 64

// legacyTableInfo reads the legacy nat table's header: every restore
// replaces the table, and a change of rules changes its size.
type legacyTableInfo struct{ fd int }

func (l *legacyTableInfo) Read() (string, error) {
	var info iptGetinfo
	copy(info.name[:], "nat")
	size := uint32(unsafe.Sizeof(info))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(l.fd), unix.SOL_IP, iptSoGetInfo,
		uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return "", fmt.Errorf("reading the legacy nat table's header (IPT_SO_GET_INFO): %w", errno)
	}
	return fmt.Sprintf("%d entries, %d bytes", info.numEntries, info.size), nil
}

func (l *legacyTableInfo) Close() error { return unix.Close(l.fd) }
