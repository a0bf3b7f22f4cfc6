package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/redirect/modes/nftables/rules"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// netlinkWriter writes a partial sync's operations to the kernel as one
// nf_tables batch, without the nft tool. nft loads every chain and set of
// the namespace before each run (a cost that grows with the table), which a
// change of one endpoint need not pay. It encodes exactly what nft 1.0.6
// sends for the same text (checked by the kernel tests, which list the
// table after both), for the operations partial syncs of ordinary services
// use; encode refuses anything else and the mode falls back to nft.
type netlinkWriter struct {
	fam      ipfamily.Family
	nfproto  uint8
	table    string
	addrType string
	nftFam   knftables.Family
	seq      uint32
	// sent counts the batches the kernel took, for tests.
	sent int
	// mapPrefix and maps name anonymous maps: the kernel numbers a
	// "__map%d" by scanning every set of the table, which grows with the
	// square of the services over a full sync.
	mapPrefix string
	maps      uint64
}

func newNetlinkWriter(fam ipfamily.Family, table string) *netlinkWriter {
	w := &netlinkWriter{fam: fam, nfproto: unix.NFPROTO_IPV4, table: table, addrType: "ipv4_addr", nftFam: knftables.IPv4Family}
	if fam == ipfamily.IPv6 {
		w.nfproto, w.addrType, w.nftFam = unix.NFPROTO_IPV6, "ipv6_addr", knftables.IPv6Family
	}
	// A prefix of this process's own, so names never meet those of a
	// previous kproxy (anonymous sets outlive it in the kernel); its first
	// character is not a digit, so the kernel's "%d" scan skips them.
	w.mapPrefix = fmt.Sprintf("k%08x", rand.Uint32())
	return w
}

// maxBatch bounds what goes over netlink in one datagram; bigger partial
// syncs are rare and go through nft.
const maxBatch = 1 << 20

// batch is an encoded transaction: the datagram, and for each message
// (numbered consecutively from first) the index in ops of the operation it
// stands for, rendered as an nft line only for an error: rendering every
// one costs more than encoding.
type batch struct {
	data     []byte
	ops      []op
	first    uint32
	msgOp    []int32
	addrType string
	nftFam   knftables.Family
}

// opOf returns the operation of the message numbered seq.
func (b *batch) opOf(seq uint32) (op, bool) {
	i := seq - b.first
	if seq < b.first || i >= uint32(len(b.msgOp)) {
		return op{}, false
	}
	return b.ops[b.msgOp[i]], true
}

// encode encodes ops, or says it cannot.
func (w *netlinkWriter) encode(ops []op) (*batch, bool) {
	size := 64
	for _, o := range ops {
		size += o.sizeEstimate()
	}
	// One allocation for the datagram (the estimates are generous), and
	// an index per message rather than a copy of its operation: a batch
	// of 200 services is a thousand messages.
	b := &batch{data: make([]byte, 0, min(size, maxBatch+64<<10)), ops: ops, addrType: w.addrType, nftFam: w.nftFam,
		msgOp: make([]int32, 0, 2*len(ops))}
	b.data = append(b.data, w.batchMsg(unix.NFNL_MSG_BATCH_BEGIN)...)
	b.first = w.seq + 1
	m := &msgBuf{data: b.data}
	setID := uint32(0)
	for i, o := range ops {
		before := w.seq
		switch o.kind {
		case opFlushChain:
			w.beginNamed(m, unix.NFT_MSG_DELRULE, 0, unix.NFTA_RULE_TABLE, unix.NFTA_RULE_CHAIN, o.chain)
			m.end()
		case opAddChain:
			w.beginNamed(m, unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME, o.chain)
			m.end()
		case opDeleteChain:
			w.beginNamed(m, unix.NFT_MSG_DELCHAIN, 0, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME, o.chain)
			m.end()
		case opAddRule:
			if o.rule.DNAT == nil || o.rule.Comment != "" {
				return nil, false
			}
			setID++
			if !w.dnatRule(m, o.chain, o.rule.DNAT, setID) {
				return nil, false
			}
		case opAddElem, opDeleteElem:
			if !w.element(m, o.kind == opAddElem, o.elem) {
				return nil, false
			}
		default:
			return nil, false // affinity sets: nft
		}
		for range w.seq - before {
			b.msgOp = append(b.msgOp, int32(i))
		}
		if len(m.data) > maxBatch {
			return nil, false
		}
	}
	b.data = m.data
	b.data = append(b.data, w.batchMsg(unix.NFNL_MSG_BATCH_END)...)
	return b, len(b.msgOp) > 0
}

// begin starts the next message of the batch in m.
func (w *netlinkWriter) begin(m *msgBuf, typ, flags int) {
	w.seq++
	m.begin(unix.NFNL_SUBSYS_NFTABLES<<8|typ, unix.NLM_F_REQUEST|flags|unix.NLM_F_ACK, w.seq, w.nfproto)
}

// beginNamed starts the next message of the batch in m with the
// attributes naming what it is about: the table (tableAttr) and one object
// of it (nameAttr), a chain or a set.
func (w *netlinkWriter) beginNamed(m *msgBuf, typ, flags, tableAttr, nameAttr int, name string) {
	w.begin(m, typ, flags)
	m.str(tableAttr, w.table)
	m.str(nameAttr, name)
}

func (w *netlinkWriter) batchMsg(typ int) []byte {
	w.seq++
	m := nl.NewNetlinkRequest(typ, 0)
	m.Seq = w.seq
	g := &nl.Nfgenmsg{NfgenFamily: unix.NFPROTO_UNSPEC, Version: nl.NFNETLINK_V0}
	d := g.Serialize()
	binary.BigEndian.PutUint16(d[2:], unix.NFNL_SUBSYS_NFTABLES)
	m.AddRawData(d)
	return m.Serialize()
}

// msgBuf appends netlink messages to a batch's datagram as they are
// written, attribute by attribute: no tree of attributes per message to
// build and serialize (the garbage of a 20,000-service addition would
// otherwise be mostly that, collected while the kernel works).
type msgBuf struct {
	data []byte
	msg  int   // offset of the message being written
	open []int // offsets of the nested attributes being written
}

// begin starts a message: the netlink header and nfgenmsg.
func (m *msgBuf) begin(typ, flags int, seq uint32, family uint8) {
	m.msg = len(m.data)
	m.data = binary.NativeEndian.AppendUint32(m.data, 0) // length, set by end
	m.data = binary.NativeEndian.AppendUint16(m.data, uint16(typ))
	m.data = binary.NativeEndian.AppendUint16(m.data, uint16(flags))
	m.data = binary.NativeEndian.AppendUint32(m.data, seq)
	m.data = binary.NativeEndian.AppendUint32(m.data, 0) // port ID: the kernel's
	m.data = append(m.data, family, nl.NFNETLINK_V0, 0, 0)
}

// end sets the message's length.
func (m *msgBuf) end() {
	binary.NativeEndian.PutUint32(m.data[m.msg:], uint32(len(m.data)-m.msg))
}

// bytes appends an attribute holding v, padded to 4 bytes.
func (m *msgBuf) bytes(typ int, v []byte) {
	m.data = binary.NativeEndian.AppendUint16(m.data, uint16(4+len(v)))
	m.data = binary.NativeEndian.AppendUint16(m.data, uint16(typ))
	m.data = append(m.data, v...)
	m.pad()
}

// str appends a NUL-terminated string attribute.
func (m *msgBuf) str(typ int, s string) {
	m.data = binary.NativeEndian.AppendUint16(m.data, uint16(4+len(s)+1))
	m.data = binary.NativeEndian.AppendUint16(m.data, uint16(typ))
	m.data = append(m.data, s...)
	m.data = append(m.data, 0)
	m.pad()
}

// u32 appends a big-endian 32-bit attribute.
func (m *msgBuf) u32(typ int, v uint32) {
	m.data = binary.NativeEndian.AppendUint16(m.data, 8)
	m.data = binary.NativeEndian.AppendUint16(m.data, uint16(typ))
	m.data = binary.BigEndian.AppendUint32(m.data, v)
}

// nest opens a nested attribute; unnest closes the last one opened.
func (m *msgBuf) nest(typ int) {
	m.open = append(m.open, len(m.data))
	m.data = binary.NativeEndian.AppendUint16(m.data, 0)
	m.data = binary.NativeEndian.AppendUint16(m.data, uint16(typ|unix.NLA_F_NESTED))
}

func (m *msgBuf) unnest() {
	at := m.open[len(m.open)-1]
	m.open = m.open[:len(m.open)-1]
	binary.NativeEndian.PutUint16(m.data[at:], uint16(len(m.data)-at))
}

func (m *msgBuf) pad() {
	for len(m.data)%4 != 0 {
		m.data = append(m.data, 0)
	}
}

func protoNumber(p string) (byte, bool) {
	switch p {
	case "tcp":
		return unix.IPPROTO_TCP, true
	case "udp":
		return unix.IPPROTO_UDP, true
	case "sctp":
		return unix.IPPROTO_SCTP, true
	}
	return 0, false
}

// dnatRule encodes "meta l4proto P dnat ip addr . port to numgen random
// mod N map { … }" as nft does: an anonymous constant map from the numgen
// value to address and port, its elements, then the rule looking it up.
func (w *netlinkWriter) dnatRule(m *msgBuf, chain string, d *rules.DNATMap, setID uint32) bool {
	proto, ok := protoNumber(d.Proto)
	if !ok || len(d.Targets) == 0 {
		return false
	}
	addrLen, dataType, protoReg := 4, uint32(7<<6|13), uint32(9) // ipv4_addr . inet_service; port in reg 1's second word
	if w.fam == ipfamily.IPv6 {
		addrLen, dataType, protoReg = 16, 8<<6|13, 2 // ipv6_addr . inet_service; port in reg 2
	}
	for _, t := range d.Targets {
		if (addrLen == 16) != t.Addr().Unmap().Is6() {
			return false
		}
	}
	dataLen := addrLen + 4
	w.maps++
	// The counter comes first: the kernel finds sets by name walking the
	// table's list, and names that differ early (or in length) compare
	// fast.
	name := "__map" + strconv.FormatUint(w.maps, 10) + w.mapPrefix
	w.beginNamed(m, unix.NFT_MSG_NEWSET, unix.NLM_F_CREATE, unix.NFTA_SET_TABLE, unix.NFTA_SET_NAME, name)
	m.u32(unix.NFTA_SET_FLAGS, unix.NFT_SET_ANONYMOUS|unix.NFT_SET_CONSTANT|unix.NFT_SET_MAP)
	m.u32(unix.NFTA_SET_KEY_TYPE, 4) // integer
	m.u32(unix.NFTA_SET_KEY_LEN, 4)
	m.u32(unix.NFTA_SET_DATA_TYPE, dataType)
	m.u32(unix.NFTA_SET_DATA_LEN, uint32(dataLen))
	m.u32(unix.NFTA_SET_ID, setID)
	m.nest(unix.NFTA_SET_DESC)
	m.u32(unix.NFTA_SET_DESC_SIZE, uint32(len(d.Targets)))
	m.unnest()
	// nft's set user data: key byte order host, data byte order unset,
	// merge-elements unset.
	m.bytes(unix.NFTA_SET_USERDATA, []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 6, 4, 0, 0, 0, 0})
	m.end()

	w.begin(m, unix.NFT_MSG_NEWSETELEM, unix.NLM_F_CREATE)
	m.str(unix.NFTA_SET_ELEM_LIST_TABLE, w.table)
	// By ID only: the kernel then finds the set in this batch's few
	// operations instead of walking every set of the table.
	m.u32(unix.NFTA_SET_ELEM_LIST_SET_ID, setID)
	m.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	var k [4]byte
	var v [20]byte
	for i, t := range d.Targets {
		m.nest(unix.NFTA_LIST_ELEM)
		m.nest(unix.NFTA_SET_ELEM_KEY)
		binary.NativeEndian.PutUint32(k[:], uint32(i))
		m.bytes(unix.NFTA_DATA_VALUE, k[:])
		m.unnest()
		m.nest(unix.NFTA_SET_ELEM_DATA)
		a := t.Addr().Unmap()
		if addrLen == 16 {
			a16 := a.As16()
			copy(v[:], a16[:])
		} else {
			a4 := a.As4()
			copy(v[:], a4[:])
		}
		binary.BigEndian.PutUint16(v[addrLen:], t.Port())
		v[addrLen+2], v[addrLen+3] = 0, 0
		m.bytes(unix.NFTA_DATA_VALUE, v[:dataLen])
		m.unnest()
		m.unnest()
	}
	m.unnest()
	m.end()

	w.beginNamed(m, unix.NFT_MSG_NEWRULE, unix.NLM_F_CREATE|unix.NLM_F_APPEND, unix.NFTA_RULE_TABLE, unix.NFTA_RULE_CHAIN, chain)
	m.nest(unix.NFTA_RULE_EXPRESSIONS)
	expr := func(name string, attrs func()) {
		m.nest(unix.NFTA_LIST_ELEM)
		m.str(unix.NFTA_EXPR_NAME, name)
		m.nest(unix.NFTA_EXPR_DATA)
		attrs()
		m.unnest()
		m.unnest()
	}
	expr("meta", func() {
		m.u32(unix.NFTA_META_DREG, unix.NFT_REG_1)
		m.u32(unix.NFTA_META_KEY, unix.NFT_META_L4PROTO)
	})
	expr("cmp", func() {
		m.u32(unix.NFTA_CMP_SREG, unix.NFT_REG_1)
		m.u32(unix.NFTA_CMP_OP, unix.NFT_CMP_EQ)
		m.nest(unix.NFTA_CMP_DATA)
		m.bytes(unix.NFTA_DATA_VALUE, []byte{proto})
		m.unnest()
	})
	expr("numgen", func() {
		m.u32(unix.NFTA_NG_DREG, unix.NFT_REG_1)
		m.u32(unix.NFTA_NG_MODULUS, uint32(len(d.Targets)))
		m.u32(unix.NFTA_NG_TYPE, unix.NFT_NG_RANDOM)
		m.u32(unix.NFTA_NG_OFFSET, 0)
	})
	expr("lookup", func() {
		m.u32(unix.NFTA_LOOKUP_SREG, unix.NFT_REG_1)
		m.u32(unix.NFTA_LOOKUP_DREG, unix.NFT_REG_1)
		m.str(unix.NFTA_LOOKUP_SET, name)
		m.u32(unix.NFTA_LOOKUP_SET_ID, setID)
	})
	expr("nat", func() {
		m.u32(unix.NFTA_NAT_TYPE, unix.NFT_NAT_DNAT)
		m.u32(unix.NFTA_NAT_FAMILY, uint32(w.nfproto))
		m.u32(unix.NFTA_NAT_REG_ADDR_MIN, unix.NFT_REG_1)
		m.u32(unix.NFTA_NAT_REG_PROTO_MIN, protoReg)
	})
	m.unnest()
	m.end()
	return true
}

// element encodes an element add or delete in one of the shared sets and
// maps; keys are concatenations whose fields nft pads to 4 bytes.
func (w *netlinkWriter) element(m *msgBuf, add bool, e rules.Element) bool {
	var fields []string // the key's field types, in order
	switch e.Container {
	case rules.ClusterIPsSet:
		fields = []string{"addr"}
	case rules.HairpinConnectionsSet:
		fields = []string{"addr", "addr", "proto", "port"}
	case rules.ServiceIPsMap, rules.NoEndpointServicesMap, rules.FirewallIPsMap:
		fields = []string{"addr", "proto", "port"}
	case rules.ServiceNodePortsMap, rules.NoEndpointNodePortsMap:
		fields = []string{"proto", "port"}
	default:
		return false
	}
	if len(e.Key) != len(fields) {
		return false
	}
	var key []byte
	for i, f := range fields {
		switch f {
		case "addr":
			a, err := netip.ParseAddr(e.Key[i])
			if err != nil || a.Is6() != (w.fam == ipfamily.IPv6) {
				return false
			}
			key = append(key, a.AsSlice()...)
		case "proto":
			p, ok := protoNumber(e.Key[i])
			if !ok {
				return false
			}
			key = append(key, p, 0, 0, 0)
		case "port":
			n, err := strconv.ParseUint(e.Key[i], 10, 16)
			if err != nil {
				return false
			}
			key = append(key, byte(n>>8), byte(n), 0, 0)
		}
	}
	typ, flags := unix.NFT_MSG_DELSETELEM, 0
	if add {
		typ, flags = unix.NFT_MSG_NEWSETELEM, unix.NLM_F_CREATE
	}
	if add && e.Map && e.Value != "drop" && !(len(e.Value) > 5 && e.Value[:5] == "goto ") {
		return false
	}
	if add && len(e.Comment) > 254 {
		return false
	}
	w.beginNamed(m, typ, flags, unix.NFTA_SET_ELEM_LIST_TABLE, unix.NFTA_SET_ELEM_LIST_SET, e.Container)
	m.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	m.nest(unix.NFTA_LIST_ELEM)
	m.nest(unix.NFTA_SET_ELEM_KEY)
	m.bytes(unix.NFTA_DATA_VALUE, key)
	m.unnest()
	if add && e.Map {
		m.nest(unix.NFTA_SET_ELEM_DATA)
		m.nest(unix.NFTA_DATA_VERDICT)
		if e.Value == "drop" {
			m.u32(unix.NFTA_VERDICT_CODE, 0) // NF_DROP
		} else {
			m.u32(unix.NFTA_VERDICT_CODE, uint32(0xfffffffc)) // NFT_GOTO, -4
			m.str(unix.NFTA_VERDICT_CHAIN, e.Value[5:])
		}
		m.unnest()
		m.unnest()
	}
	if add && e.Comment != "" {
		m.data = binary.NativeEndian.AppendUint16(m.data, uint16(4+2+len(e.Comment)+1))
		m.data = binary.NativeEndian.AppendUint16(m.data, unix.NFTA_SET_ELEM_USERDATA)
		m.data = append(m.data, 0, byte(len(e.Comment)+1))
		m.data = append(m.data, e.Comment...)
		m.data = append(m.data, 0)
		m.pad()
	}
	m.unnest()
	m.unnest()
	m.end()
	return true
}

// run sends the batch and waits for the kernel's answer to every message.
// A refused batch changes nothing (nf_tables batches are atomic); the
// error names the nft line of the first message the kernel refused, which
// is returned too.
func (w *netlinkWriter) run(b *batch) (string, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return "", fmt.Errorf("opening a netfilter netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return "", fmt.Errorf("binding a netfilter netlink socket: %w", err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 30}); err != nil {
		return "", fmt.Errorf("setting a receive timeout: %w", err)
	}
	// One batch is one datagram: room for it, and for the acknowledgements.
	// Without CAP_NET_ADMIN this fails; a batch too big for the default
	// buffer then fails to send, and the mode falls back to nft.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*len(b.data)+(64<<10))
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	if err := unix.Sendto(fd, b.data, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return "", fmt.Errorf("sending an nf_tables batch of %d bytes: %w", len(b.data), err)
	}
	pending := len(b.msgOp)
	var firstErr error
	var firstLine string
	firstSeq := ^uint32(0)
	buf := make([]byte, 1<<16)
	for pending > 0 {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return "", fmt.Errorf("reading the kernel's answer to an nf_tables batch: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return "", fmt.Errorf("reading the kernel's answer to an nf_tables batch: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4+unix.SizeofNlMsghdr {
				continue
			}
			seq := binary.NativeEndian.Uint32(m.Data[4+8 : 4+12]) // the refused message's header
			o, ours := b.opOf(seq)
			if !ours {
				continue
			}
			pending--
			code := int32(binary.NativeEndian.Uint32(m.Data[:4]))
			if code != 0 && seq < firstSeq {
				line := o.text(b.addrType, b.nftFam)
				firstSeq, firstLine = seq, line
				firstErr = fmt.Errorf("nf_tables refused %q: %w", line, syscall.Errno(-code))
			}
			if code != 0 && errors.Is(syscall.Errno(-code), unix.ENOBUFS) {
				pending = 0
			}
		}
	}
	if firstErr != nil {
		return firstLine, fmt.Errorf("netlink transaction failed, %w", firstErr)
	}
	w.sent++
	return "", nil
}
