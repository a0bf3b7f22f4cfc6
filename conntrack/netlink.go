package conntrack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// NetlinkTable is the real Table, over ctnetlink on a socket of its own. A
// pass is one dump of the family's table, read with a parser that keeps only
// what cleanup decides on, and the selected flows' deletions written
// deleteBatch to a write: a userspace-mode stop deletes every UDP flow to a
// service, tens of thousands under traffic, and one request and
// acknowledgement per flow (netlink.Handle's way) kept the exiting process
// alive for seconds after its portals were gone. It is not safe for
// concurrent use.
type NetlinkTable struct {
	fd  int
	seq uint32
	buf []byte
	// writes counts the requests written to the socket (tests).
	writes int
}

var _ Table = (*NetlinkTable)(nil)

const (
	// deleteBatch is how many deletions one write carries. Only the last
	// asks for an acknowledgement, but each that fails queues an error on
	// the socket before the write returns, at about 1 KiB of the receive
	// buffer's default 208 KiB each: a batch must fail whole without
	// overrunning it.
	deleteBatch = 128
	// recvBufferSize holds the largest dump message the kernel builds (it
	// sizes them to the reader's buffer, at most 32 KiB) with room to spare.
	recvBufferSize = 64 << 10
	// The ctnetlink message types and attributes used here
	// (linux/netfilter/nfnetlink_conntrack.h).
	ctnlSubsys     = 1 // NFNL_SUBSYS_CTNETLINK
	ctnlGet        = 1 // IPCTNL_MSG_CT_GET
	ctnlDelete     = 2 // IPCTNL_MSG_CT_DELETE
	ctaTupleOrig   = 1
	ctaTupleReply  = 2
	ctaZone        = 18
	ctaTupleIP     = 1
	ctaTupleProto  = 2
	ctaIPv4Src     = 1
	ctaIPv4Dst     = 2
	ctaIPv6Src     = 3
	ctaIPv6Dst     = 4
	ctaProtoNum    = 1
	ctaProtoSrc    = 2
	ctaProtoDst    = 3
	nlaNested      = 1 << 15
	nlaTypeMask    = ^uint16(3 << 14)
	nfgenmsgLength = 4
	// recvTimeout bounds a wait for the kernel's answer, which comes at
	// once: a pass must never hang the sync or the exit.
	recvTimeout = 30 * time.Second
)

// NewNetlinkTable opens a netfilter netlink socket in the calling thread's
// network namespace.
func NewNetlinkTable() (*NetlinkTable, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening a netfilter netlink socket for conntrack: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding the conntrack netlink socket: %w", err)
	}
	// Best effort: without it an error acknowledgement carries the request
	// too, and fewer fit in the buffer.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	tv := unix.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("setting the conntrack netlink socket's receive timeout: %w", err)
	}
	return &NetlinkTable{fd: fd, buf: make([]byte, recvBufferSize)}, nil
}

// Delete implements Table: one dump of the family's table, then the
// selected flows' deletions in batches on the same socket. A flow that is
// gone by the time its deletion arrives (it expired) counts as deleted. A
// dump the kernel marks interrupted (the table changed while it was read)
// may have missed flows: what it found is deleted and an error says so, so
// the caller tries again.
func (t *NetlinkTable) Delete(req *Request) (int, error) {
	m := req.Matcher()
	family := uint8(inetFamily(req.Family))
	var selected []ctFlow
	dumpErr := t.dump(family, func(f ctFlow) {
		if m.Match(f.Flow) {
			selected = append(selected, f)
		}
	})
	if dumpErr != nil && !errors.Is(dumpErr, errDumpInterrupted) {
		return 0, fmt.Errorf("listing %s conntrack flows: %w", req.Family, dumpErr)
	}
	deleted, err := t.deleteFlows(family, selected)
	if err = errors.Join(dumpErr, err); err != nil {
		return deleted, fmt.Errorf("deleting %s conntrack flows (%d deleted): %w", req.Family, deleted, err)
	}
	return deleted, nil
}

// Close closes the socket.
func (t *NetlinkTable) Close() error {
	return unix.Close(t.fd)
}

// ctFlow is a dumped flow with what its deletion names: the original
// tuple, which Flow holds, and the zone.
type ctFlow struct {
	Flow
	zone uint16
}

var errDumpInterrupted = errors.New("the kernel interrupted the dump (the table changed while it was read)")

// dump reads the family's conntrack table, calling each for every flow.
func (t *NetlinkTable) dump(family uint8, each func(ctFlow)) error {
	seq := t.nextSeq()
	if err := t.write(request(ctnlGet, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, seq, family, nil)); err != nil {
		return err
	}
	var interrupted bool
	for {
		msgs, err := t.read()
		if err != nil {
			return err
		}
		for _, msg := range msgs {
			if msg.Header.Seq != seq {
				continue
			}
			if msg.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			switch msg.Header.Type {
			case unix.NLMSG_DONE:
				if interrupted {
					return errDumpInterrupted
				}
				return nil
			case unix.NLMSG_ERROR:
				if errno := ackErrno(msg.Data); errno != 0 {
					return fmt.Errorf("dumping conntrack: %w", errno)
				}
				return nil
			}
			if len(msg.Data) < nfgenmsgLength {
				continue
			}
			if f, ok := parseFlow(msg.Data[nfgenmsgLength:]); ok {
				each(f)
			}
		}
	}
}

// deleteFlows deletes flows, deleteBatch to a write, and returns how many
// went.
func (t *NetlinkTable) deleteFlows(family uint8, flows []ctFlow) (int, error) {
	deleted := 0
	var failures []error
	for start := 0; start < len(flows); start += deleteBatch {
		batch := flows[start:min(start+deleteBatch, len(flows))]
		failed, err := t.deleteBatch(family, batch)
		if err != nil {
			return deleted, err
		}
		deleted += len(batch) - len(failed)
		failures = append(failures, failed...)
	}
	if len(failures) > 0 {
		return deleted, fmt.Errorf("%d of %d deletions failed, the first with: %w", len(failures), len(flows), failures[0])
	}
	return deleted, nil
}

// deleteBatch writes batch's deletions at once and returns the errors of
// those that failed; err is a failure to write or read, which leaves the
// outcome unknown.
func (t *NetlinkTable) deleteBatch(family uint8, batch []ctFlow) (failed []error, err error) {
	var payload []byte
	first := t.seq + 1
	for i, f := range batch {
		flags := uint16(unix.NLM_F_REQUEST)
		if i == len(batch)-1 {
			flags |= unix.NLM_F_ACK
		}
		payload = append(payload, request(ctnlDelete, flags, t.nextSeq(), family, deletion(family, f))...)
	}
	if err := t.write(payload); err != nil {
		return nil, err
	}
	// The kernel has handled the whole batch when the write returns: an
	// error per failed deletion and the last one's acknowledgement are
	// waiting, in order.
	last := t.seq
	for {
		msgs, err := t.read()
		if err != nil {
			return nil, fmt.Errorf("reading deletion acknowledgements: %w", err)
		}
		done := false
		for _, msg := range msgs {
			if msg.Header.Type != unix.NLMSG_ERROR || msg.Header.Seq-first > last-first {
				continue // not an answer to this batch
			}
			// A flow gone already (expired) is as good as deleted.
			if errno := ackErrno(msg.Data); errno != 0 && errno != unix.ENOENT {
				failed = append(failed, errno)
			}
			done = done || msg.Header.Seq == last
		}
		if done {
			return failed, nil
		}
	}
}

func (t *NetlinkTable) nextSeq() uint32 {
	t.seq++
	return t.seq
}

func (t *NetlinkTable) write(b []byte) error {
	t.writes++
	if err := unix.Sendto(t.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("writing to the conntrack netlink socket: %w", err)
	}
	return nil
}

func (t *NetlinkTable) read() ([]syscall.NetlinkMessage, error) {
	n, _, flags, _, err := unix.Recvmsg(t.fd, t.buf, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the conntrack netlink socket: %w", err)
	}
	if flags&unix.MSG_TRUNC != 0 {
		return nil, errors.New("reading the conntrack netlink socket: message larger than the buffer")
	}
	msgs, err := syscall.ParseNetlinkMessage(t.buf[:n])
	if err != nil {
		return nil, fmt.Errorf("parsing a conntrack netlink message: %w", err)
	}
	return msgs, nil
}

// request is one ctnetlink message: the netlink header, the nfgenmsg of
// family, and the attributes.
func request(msgType, flags uint16, seq uint32, family uint8, attrs []byte) []byte {
	length := unix.NLMSG_HDRLEN + nfgenmsgLength + len(attrs)
	b := make([]byte, 0, length)
	b = binary.NativeEndian.AppendUint32(b, uint32(length))
	b = binary.NativeEndian.AppendUint16(b, ctnlSubsys<<8|msgType)
	b = binary.NativeEndian.AppendUint16(b, flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, family, unix.NFNETLINK_V0, 0, 0)
	return append(b, attrs...)
}

// deletion is the attributes of f's deletion: its original tuple, and its
// zone when not the default one.
func deletion(family uint8, f ctFlow) []byte {
	var ip []byte
	if family == unix.AF_INET6 {
		src, dst := f.OrigSrc.Addr().As16(), f.OrigDst.Addr().As16()
		ip = attr(ip, ctaIPv6Src, src[:])
		ip = attr(ip, ctaIPv6Dst, dst[:])
	} else {
		ip = attr(ip, ctaIPv4Src, f.OrigSrc.Addr().AsSlice())
		ip = attr(ip, ctaIPv4Dst, f.OrigDst.Addr().AsSlice())
	}
	var proto []byte
	proto = attr(proto, ctaProtoNum, []byte{byte(f.Protocol)})
	proto = attr(proto, ctaProtoSrc, binary.BigEndian.AppendUint16(nil, f.OrigSrc.Port()))
	proto = attr(proto, ctaProtoDst, binary.BigEndian.AppendUint16(nil, f.OrigDst.Port()))
	var tuple []byte
	tuple = attr(tuple, ctaTupleIP|nlaNested, ip)
	tuple = attr(tuple, ctaTupleProto|nlaNested, proto)
	out := attr(nil, ctaTupleOrig|nlaNested, tuple)
	if f.zone != 0 {
		out = attr(out, ctaZone, binary.BigEndian.AppendUint16(nil, f.zone))
	}
	return out
}

// attr appends a netlink attribute, padded to 4 bytes.
func attr(b []byte, typ uint16, value []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofNlAttr+len(value)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, value...)
	for len(b)%unix.NLA_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

// attrs calls each for every attribute in b, with its type (flags cleared)
// and value; a malformed attribute ends the walk.
func attrs(b []byte, each func(typ uint16, value []byte)) {
	for len(b) >= unix.SizeofNlAttr {
		length := int(binary.NativeEndian.Uint16(b))
		if length < unix.SizeofNlAttr || length > len(b) {
			return
		}
		each(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[unix.SizeofNlAttr:length])
		b = b[min((length+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1), len(b)):]
	}
}

// parseFlow reads a dumped conntrack entry's attributes; ok is false when it
// lacks an original or reply tuple.
func parseFlow(b []byte) (f ctFlow, ok bool) {
	var orig, reply tuple
	attrs(b, func(typ uint16, v []byte) {
		switch typ {
		case ctaTupleOrig:
			orig = parseTuple(v)
		case ctaTupleReply:
			reply = parseTuple(v)
		case ctaZone:
			if len(v) == 2 {
				f.zone = binary.BigEndian.Uint16(v)
			}
		}
	})
	if !orig.src.IsValid() || !orig.dst.IsValid() || !reply.src.IsValid() {
		return ctFlow{}, false
	}
	f.Flow = Flow{Protocol: orig.proto,
		OrigSrc:  netip.AddrPortFrom(orig.src, orig.srcPort),
		OrigDst:  netip.AddrPortFrom(orig.dst, orig.dstPort),
		ReplySrc: netip.AddrPortFrom(reply.src, reply.srcPort)}
	return f, true
}

// tuple is one direction of a conntrack entry.
type tuple struct {
	proto            Protocol
	src, dst         netip.Addr
	srcPort, dstPort uint16
}

func parseTuple(b []byte) tuple {
	var t tuple
	attrs(b, func(typ uint16, v []byte) {
		switch typ {
		case ctaTupleIP:
			attrs(v, func(typ uint16, v []byte) {
				a, ok := netip.AddrFromSlice(v)
				if !ok {
					return
				}
				switch typ {
				case ctaIPv4Src, ctaIPv6Src:
					t.src = a.Unmap()
				case ctaIPv4Dst, ctaIPv6Dst:
					t.dst = a.Unmap()
				}
			})
		case ctaTupleProto:
			attrs(v, func(typ uint16, v []byte) {
				switch {
				case typ == ctaProtoNum && len(v) == 1:
					t.proto = Protocol(v[0])
				case typ == ctaProtoSrc && len(v) == 2:
					t.srcPort = binary.BigEndian.Uint16(v)
				case typ == ctaProtoDst && len(v) == 2:
					t.dstPort = binary.BigEndian.Uint16(v)
				}
			})
		}
	})
	return t
}

// ackErrno is the error an NLMSG_ERROR message carries (0: an
// acknowledgement).
func ackErrno(data []byte) unix.Errno {
	if len(data) < 4 {
		return unix.EINVAL
	}
	return unix.Errno(-int32(binary.NativeEndian.Uint32(data)))
}

func inetFamily(f ipfamily.Family) netlink.InetFamily { return netlink.InetFamily(f.Domain()) }

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
