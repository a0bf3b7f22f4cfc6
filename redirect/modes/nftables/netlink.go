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
// the namespace before each run (about 0.3 s at 30,000 services), which a
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
	setID := uint32(0)
	index := int32(0)
	add := func(msgs ...*nl.NetlinkRequest) {
		for _, m := range msgs {
			b.msgOp = append(b.msgOp, index)
			b.data = append(b.data, m.Serialize()...)
		}
	}
	for i, o := range ops {
		index = int32(i)
		switch o.kind {
		case opFlushChain:
			m := w.msg(unix.NFT_MSG_DELRULE, 0)
			m.AddData(strAttr(unix.NFTA_RULE_TABLE, w.table))
			m.AddData(strAttr(unix.NFTA_RULE_CHAIN, o.chain))
			add(m)
		case opAddChain:
			m := w.msg(unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE)
			m.AddData(strAttr(unix.NFTA_CHAIN_TABLE, w.table))
			m.AddData(strAttr(unix.NFTA_CHAIN_NAME, o.chain))
			add(m)
		case opDeleteChain:
			m := w.msg(unix.NFT_MSG_DELCHAIN, 0)
			m.AddData(strAttr(unix.NFTA_CHAIN_TABLE, w.table))
			m.AddData(strAttr(unix.NFTA_CHAIN_NAME, o.chain))
			add(m)
		case opAddRule:
			if o.rule.DNAT == nil || o.rule.Comment != "" {
				return nil, false
			}
			setID++
			msgs, ok := w.dnatRule(o.chain, o.rule.DNAT, setID)
			if !ok {
				return nil, false
			}
			add(msgs...)
		case opAddElem, opDeleteElem:
			m, ok := w.element(o.kind == opAddElem, o.elem)
			if !ok {
				return nil, false
			}
			add(m)
		default:
			return nil, false // affinity sets: nft
		}
		if len(b.data) > maxBatch {
			return nil, false
		}
	}
	b.data = append(b.data, w.batchMsg(unix.NFNL_MSG_BATCH_END)...)
	return b, len(b.msgOp) > 0
}

func (w *netlinkWriter) msg(typ int, flags int) *nl.NetlinkRequest {
	w.seq++
	m := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|typ, flags|unix.NLM_F_ACK)
	m.Seq = w.seq
	m.AddData(&nl.Nfgenmsg{NfgenFamily: w.nfproto, Version: nl.NFNETLINK_V0})
	return m
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

func strAttr(typ int, s string) *nl.RtAttr { return nl.NewRtAttr(typ, nl.ZeroTerminated(s)) }

func u32Attr(typ int, v uint32) *nl.RtAttr {
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, v)
	return nl.NewRtAttr(typ, b)
}

func nested(typ int) *nl.RtAttr { return nl.NewRtAttr(typ|unix.NLA_F_NESTED, nil) }

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
func (w *netlinkWriter) dnatRule(chain string, d *rules.DNATMap, setID uint32) ([]*nl.NetlinkRequest, bool) {
	proto, ok := protoNumber(d.Proto)
	if !ok || len(d.Targets) == 0 {
		return nil, false
	}
	addrLen, dataType, protoReg := 4, uint32(7<<6|13), uint32(9) // ipv4_addr . inet_service; port in reg 1's second word
	if w.fam == ipfamily.IPv6 {
		addrLen, dataType, protoReg = 16, 8<<6|13, 2 // ipv6_addr . inet_service; port in reg 2
	}
	dataLen := addrLen + 4
	w.maps++
	// The counter comes first: the kernel finds sets by name walking the
	// table's list, and names that differ early (or in length) compare
	// fast.
	name := "__map" + strconv.FormatUint(w.maps, 10) + w.mapPrefix
	set := w.msg(unix.NFT_MSG_NEWSET, unix.NLM_F_CREATE)
	set.AddData(strAttr(unix.NFTA_SET_TABLE, w.table))
	set.AddData(strAttr(unix.NFTA_SET_NAME, name))
	set.AddData(u32Attr(unix.NFTA_SET_FLAGS, unix.NFT_SET_ANONYMOUS|unix.NFT_SET_CONSTANT|unix.NFT_SET_MAP))
	set.AddData(u32Attr(unix.NFTA_SET_KEY_TYPE, 4)) // integer
	set.AddData(u32Attr(unix.NFTA_SET_KEY_LEN, 4))
	set.AddData(u32Attr(unix.NFTA_SET_DATA_TYPE, dataType))
	set.AddData(u32Attr(unix.NFTA_SET_DATA_LEN, uint32(dataLen)))
	set.AddData(u32Attr(unix.NFTA_SET_ID, setID))
	desc := nested(unix.NFTA_SET_DESC)
	desc.AddChild(u32Attr(unix.NFTA_SET_DESC_SIZE, uint32(len(d.Targets))))
	set.AddData(desc)
	// nft's set user data: key byte order host, data byte order unset,
	// merge-elements unset.
	set.AddData(nl.NewRtAttr(unix.NFTA_SET_USERDATA, []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 6, 4, 0, 0, 0, 0}))

	elems := w.msg(unix.NFT_MSG_NEWSETELEM, unix.NLM_F_CREATE)
	elems.AddData(strAttr(unix.NFTA_SET_ELEM_LIST_TABLE, w.table))
	// By ID only: the kernel then finds the set in this batch's few
	// operations instead of walking every set of the table.
	elems.AddData(u32Attr(unix.NFTA_SET_ELEM_LIST_SET_ID, setID))
	list := nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	for i, t := range d.Targets {
		a := t.Addr().Unmap()
		if (addrLen == 16) != a.Is6() {
			return nil, false
		}
		e := nested(unix.NFTA_LIST_ELEM)
		key := nested(unix.NFTA_SET_ELEM_KEY)
		k := make([]byte, 4)
		binary.NativeEndian.PutUint32(k, uint32(i))
		key.AddChild(nl.NewRtAttr(unix.NFTA_DATA_VALUE, k))
		e.AddChild(key)
		data := nested(unix.NFTA_SET_ELEM_DATA)
		v := append(a.AsSlice(), 0, 0, 0, 0)
		binary.BigEndian.PutUint16(v[addrLen:], t.Port())
		data.AddChild(nl.NewRtAttr(unix.NFTA_DATA_VALUE, v))
		e.AddChild(data)
		list.AddChild(e)
	}
	elems.AddData(list)

	rule := w.msg(unix.NFT_MSG_NEWRULE, unix.NLM_F_CREATE|unix.NLM_F_APPEND)
	rule.AddData(strAttr(unix.NFTA_RULE_TABLE, w.table))
	rule.AddData(strAttr(unix.NFTA_RULE_CHAIN, chain))
	exprs := nested(unix.NFTA_RULE_EXPRESSIONS)
	expr := func(name string, attrs ...*nl.RtAttr) {
		e := nested(unix.NFTA_LIST_ELEM)
		e.AddChild(strAttr(unix.NFTA_EXPR_NAME, name))
		data := nested(unix.NFTA_EXPR_DATA)
		for _, a := range attrs {
			data.AddChild(a)
		}
		e.AddChild(data)
		exprs.AddChild(e)
	}
	expr("meta", u32Attr(unix.NFTA_META_DREG, unix.NFT_REG_1), u32Attr(unix.NFTA_META_KEY, unix.NFT_META_L4PROTO))
	cmpData := nested(unix.NFTA_CMP_DATA)
	cmpData.AddChild(nl.NewRtAttr(unix.NFTA_DATA_VALUE, []byte{proto}))
	expr("cmp", u32Attr(unix.NFTA_CMP_SREG, unix.NFT_REG_1), u32Attr(unix.NFTA_CMP_OP, unix.NFT_CMP_EQ), cmpData)
	expr("numgen", u32Attr(unix.NFTA_NG_DREG, unix.NFT_REG_1), u32Attr(unix.NFTA_NG_MODULUS, uint32(len(d.Targets))),
		u32Attr(unix.NFTA_NG_TYPE, unix.NFT_NG_RANDOM), u32Attr(unix.NFTA_NG_OFFSET, 0))
	expr("lookup", u32Attr(unix.NFTA_LOOKUP_SREG, unix.NFT_REG_1), u32Attr(unix.NFTA_LOOKUP_DREG, unix.NFT_REG_1),
		strAttr(unix.NFTA_LOOKUP_SET, name), u32Attr(unix.NFTA_LOOKUP_SET_ID, setID))
	expr("nat", u32Attr(unix.NFTA_NAT_TYPE, unix.NFT_NAT_DNAT), u32Attr(unix.NFTA_NAT_FAMILY, uint32(w.nfproto)),
		u32Attr(unix.NFTA_NAT_REG_ADDR_MIN, unix.NFT_REG_1), u32Attr(unix.NFTA_NAT_REG_PROTO_MIN, protoReg))
	rule.AddData(exprs)
	return []*nl.NetlinkRequest{set, elems, rule}, true
}

// element encodes an element add or delete in one of the shared sets and
// maps; keys are concatenations whose fields nft pads to 4 bytes.
func (w *netlinkWriter) element(add bool, e rules.Element) (*nl.NetlinkRequest, bool) {
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
		return nil, false
	}
	if len(e.Key) != len(fields) {
		return nil, false
	}
	var key []byte
	for i, f := range fields {
		switch f {
		case "addr":
			a, err := netip.ParseAddr(e.Key[i])
			if err != nil || a.Is6() != (w.fam == ipfamily.IPv6) {
				return nil, false
			}
			key = append(key, a.AsSlice()...)
		case "proto":
			p, ok := protoNumber(e.Key[i])
			if !ok {
				return nil, false
			}
			key = append(key, p, 0, 0, 0)
		case "port":
			n, err := strconv.ParseUint(e.Key[i], 10, 16)
			if err != nil {
				return nil, false
			}
			key = append(key, byte(n>>8), byte(n), 0, 0)
		}
	}
	typ, flags := unix.NFT_MSG_DELSETELEM, 0
	if add {
		typ, flags = unix.NFT_MSG_NEWSETELEM, unix.NLM_F_CREATE
	}
	m := w.msg(typ, flags)
	m.AddData(strAttr(unix.NFTA_SET_ELEM_LIST_TABLE, w.table))
	m.AddData(strAttr(unix.NFTA_SET_ELEM_LIST_SET, e.Container))
	list := nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	el := nested(unix.NFTA_LIST_ELEM)
	k := nested(unix.NFTA_SET_ELEM_KEY)
	k.AddChild(nl.NewRtAttr(unix.NFTA_DATA_VALUE, key))
	el.AddChild(k)
	if add && e.Map {
		verdict := nested(unix.NFTA_DATA_VERDICT)
		switch {
		case e.Value == "drop":
			verdict.AddChild(u32Attr(unix.NFTA_VERDICT_CODE, 0)) // NF_DROP
		case len(e.Value) > 5 && e.Value[:5] == "goto ":
			verdict.AddChild(u32Attr(unix.NFTA_VERDICT_CODE, uint32(0xfffffffc))) // NFT_GOTO, -4
			verdict.AddChild(strAttr(unix.NFTA_VERDICT_CHAIN, e.Value[5:]))
		default:
			return nil, false
		}
		data := nested(unix.NFTA_SET_ELEM_DATA)
		data.AddChild(verdict)
		el.AddChild(data)
	}
	if add && e.Comment != "" {
		if len(e.Comment) > 254 {
			return nil, false
		}
		ud := append([]byte{0, byte(len(e.Comment) + 1)}, e.Comment...)
		el.AddChild(nl.NewRtAttr(unix.NFTA_SET_ELEM_USERDATA, append(ud, 0)))
	}
	list.AddChild(el)
	m.AddData(list)
	return m, true
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
