package syncscale

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
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

// NFTWatch is nf_tables' side of NATVersion, for the nftables rows: the
// ruleset generation, which every committed transaction (nft's and
// iptables-nft's alike) moves, and one chain's rules and their anonymous
// maps, read over netlink.
type NFTWatch interface {
	NATVersion
	ChainDump(table, chain string) (raw []byte, ok bool, err error)
}

// OpenNFTWatch opens an NFTWatch in the calling process's namespace.
func OpenNFTWatch() (NFTWatch, error) {
	v, err := OpenNATVersion(kernel.NFT)
	if err != nil {
		return nil, err
	}
	return v.(*nftGeneration), nil
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
	typ, body, err := g.roundTrip(unix.NFT_MSG_GETGEN, unix.AF_UNSPEC, nil)
	if err != nil {
		return "", fmt.Errorf("asking nf_tables for its generation: %w", err)
	}
	if typ == unix.NLMSG_ERROR {
		return "", errors.New("nf_tables' generation: an empty error reply")
	}
	return parseGeneration(body)
}

// ChainDump returns a chain's rules as nf_tables holds them, with the
// elements of the anonymous sets and maps they look up (nft's inline
// "{ … }", such as the nftables mode's numgen map of endpoints): the raw
// netlink messages, for searching with EndpointBytes. ok is false when
// the chain holds no rules or does not exist (a dump filtered on a missing
// table or chain is just empty). Two or three netlink requests, whose replies
// hold only this chain's rules and sets, whatever the table's size.
func (g *nftGeneration) ChainDump(table, chain string) (raw []byte, ok bool, err error) {
	attrs := append(nlString(unix.NFTA_RULE_TABLE, table), nlString(unix.NFTA_RULE_CHAIN, chain)...)
	rules, err := g.dump(unix.NFT_MSG_GETRULE, unix.AF_INET, attrs)
	if errors.Is(err, unix.ENOENT) || (err == nil && len(rules) == 0) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("dumping the rules of chain %s of table ip %s: %w", chain, table, err)
	}
	raw = slices.Concat(rules...)
	for _, set := range anonymousSets(raw) {
		attrs := append(nlString(unix.NFTA_SET_ELEM_LIST_TABLE, table), nlString(unix.NFTA_SET_ELEM_LIST_SET, set)...)
		elems, err := g.dump(unix.NFT_MSG_GETSETELEM, unix.AF_INET, attrs)
		if errors.Is(err, unix.ENOENT) {
			// Gone with a newer generation of the chain: the caller
			// looks again at the next one.
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("dumping the elements of %s (chain %s): %w", set, chain, err)
		}
		raw = append(raw, slices.Concat(elems...)...)
	}
	return raw, true, nil
}

// anonymousSets finds the names of the anonymous sets and maps that rule
// messages refer to: NUL-terminated strings in their lookup expressions,
// "__set" or "__map" and a suffix (nft numbers them, "__map12"; a netlink
// writer may name them otherwise, such as kproxy's "__map101kff1e2570").
func anonymousSets(raw []byte) []string {
	var names []string
	for rest := raw; ; {
		i := bytes.Index(rest, []byte("__"))
		if i < 0 {
			return names
		}
		rest = rest[i:]
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			return names
		}
		name := string(rest[:end])
		if isAnonymousSetName(name) && !slices.Contains(names, name) {
			names = append(names, name)
		}
		rest = rest[2:]
	}
}

func isAnonymousSetName(name string) bool {
	for _, prefix := range []string{"__set", "__map"} {
		if suffix, ok := strings.CutPrefix(name, prefix); ok && suffix != "" && strings.Trim(suffix, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_") == "" {
			return true
		}
	}
	return false
}

// EndpointBytes is how an IPv4 endpoint appears in an "ip . port" map
// value (kube-proxy v1.36's numgen map of endpoints, one endpoint or
// many): the address, then the port, both in network order.
func EndpointBytes(ep netip.AddrPort) []byte {
	a := ep.Addr().As4()
	return []byte{a[0], a[1], a[2], a[3], byte(ep.Port() >> 8), byte(ep.Port())}
}

// dump runs an nf_tables dump request and returns each reply message's
// body; an error reply is returned as its errno.
func (g *nftGeneration) dump(msg uint16, family byte, attrs []byte) ([][]byte, error) {
	if err := g.send(msg, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, family, attrs); err != nil {
		return nil, err
	}
	var out [][]byte
	buf := make([]byte, 1<<20)
	for {
		n, _, err := unix.Recvfrom(g.fd, buf, 0)
		if err != nil {
			return nil, err
		}
		for m := buf[:n]; len(m) >= unix.NLMSG_HDRLEN; {
			length := int(binary.NativeEndian.Uint32(m[0:]))
			if length < unix.NLMSG_HDRLEN || length > len(m) {
				return nil, fmt.Errorf("bad netlink message length %d", length)
			}
			typ, seq := binary.NativeEndian.Uint16(m[4:]), binary.NativeEndian.Uint32(m[8:])
			body := m[unix.NLMSG_HDRLEN:length]
			m = m[min(align4(length), len(m)):]
			switch {
			case seq != g.seq:
			case typ == unix.NLMSG_DONE:
				return out, nil
			case typ == unix.NLMSG_ERROR:
				if len(body) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(body)); errno != 0 {
						return nil, unix.Errno(-errno)
					}
				}
				return out, nil
			default:
				out = append(out, slices.Clone(body))
			}
		}
	}
}

// send sends one nf_tables request under a new sequence number.
func (g *nftGeneration) send(msg, flags uint16, family byte, attrs []byte) error {
	g.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+sizeofNfgenmsg, unix.NLMSG_HDRLEN+sizeofNfgenmsg+len(attrs))
	req = append(req, attrs...)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.NFNL_SUBSYS_NFTABLES<<8|msg)
	binary.NativeEndian.PutUint16(req[6:], flags)
	binary.NativeEndian.PutUint32(req[8:], g.seq)
	req[unix.NLMSG_HDRLEN] = family
	req[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	return unix.Sendto(g.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// nlString is a netlink attribute holding s, NUL-terminated and padded.
func nlString(typ uint16, s string) []byte {
	n := unix.SizeofNlAttr + len(s) + 1
	b := make([]byte, align4(n))
	binary.NativeEndian.PutUint16(b[0:], uint16(n))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[unix.SizeofNlAttr:], s)
	return b
}

// roundTrip sends one nf_tables request (not a dump) and returns its
// reply's type and body (after struct nfgenmsg for a message; an error
// reply with a non-zero errno is returned as that errno).
func (g *nftGeneration) roundTrip(msg uint16, family byte, attrs []byte) (uint16, []byte, error) {
	if err := g.send(msg, unix.NLM_F_REQUEST, family, attrs); err != nil {
		return 0, nil, err
	}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(g.fd, buf, 0)
		if err != nil {
			return 0, nil, err
		}
		for msg := buf[:n]; len(msg) >= unix.NLMSG_HDRLEN; {
			length := int(binary.NativeEndian.Uint32(msg[0:]))
			if length < unix.NLMSG_HDRLEN || length > len(msg) {
				return 0, nil, fmt.Errorf("bad netlink message length %d", length)
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
						return 0, nil, unix.Errno(-errno)
					}
				}
				return typ, nil, nil
			default:
				return typ, body, nil
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
