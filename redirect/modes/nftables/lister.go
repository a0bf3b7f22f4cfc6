package nftables

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Lister reads what the mode needs to know about its table without the nft
// tool, whose every run loads every chain and set of the namespace (seconds
// at 10,000 services): the names of its chains and
// sets, and how many rules one chain holds.
type Lister interface {
	// Names lists the table's chains and sets (none when it is missing).
	Names(ctx context.Context) (chains, sets []string, err error)
	// RuleCount counts one chain's rules; -1 when the chain (or the table)
	// is missing.
	RuleCount(ctx context.Context, chain string) (int, error)
	// ElementCount counts the elements of one set or map; -1 when it (or
	// the table) is missing.
	ElementCount(ctx context.Context, name string, isMap bool) (int, error)
}

// GenerationReader reads nf_tables' ruleset generation: a number the
// kernel changes at every committed transaction in the network namespace,
// whoever makes it and whatever table it touches. A Lister that is one
// lets the mode skip its checks while nobody but itself wrote.
type GenerationReader interface {
	Generation(ctx context.Context) (uint32, error)
}

// knftLister is the Lister over a knftables.Interface (the fake in tests).
type knftLister struct{ nft knftables.Interface }

func (l knftLister) Names(ctx context.Context) ([]string, []string, error) {
	all, err := l.nft.ListAll(ctx)
	if err != nil {
		if knftables.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	return all["chain"], all["set"], nil
}

func (l knftLister) RuleCount(ctx context.Context, chain string) (int, error) {
	rs, err := l.nft.ListRules(ctx, chain)
	if err != nil {
		if knftables.IsNotFound(err) {
			return -1, nil
		}
		return 0, err
	}
	return len(rs), nil
}

func (l knftLister) ElementCount(ctx context.Context, name string, isMap bool) (int, error) {
	typ := "set"
	if isMap {
		typ = "map"
	}
	es, err := l.nft.ListElements(ctx, typ, name)
	if err != nil {
		if knftables.IsNotFound(err) {
			return -1, nil
		}
		return 0, err
	}
	return len(es), nil
}

// NetlinkLister is the Lister over nf_tables netlink dumps, filtered in the
// kernel where it can (one chain's rules); its cost does not grow with the
// number of services.
type NetlinkLister struct {
	family uint8
	table  string
}

// NewNetlinkLister returns the Lister of fam's table.
func NewNetlinkLister(fam ipfamily.Family, table string) *NetlinkLister {
	l := &NetlinkLister{family: unix.NFPROTO_IPV4, table: table}
	if fam == ipfamily.IPv6 {
		l.family = unix.NFPROTO_IPV6
	}
	return l
}

// dump runs one nf_tables dump request with attrs and returns the
// attributes of each message.
func (l *NetlinkLister) dump(msgType int, attrs ...*nl.RtAttr) ([][]nlAttr, error) {
	msgs, _, err := l.request(msgType, unix.NLM_F_DUMP, attrs...)
	if err != nil {
		return nil, err
	}
	out := make([][]nlAttr, 0, len(msgs))
	for _, msg := range msgs {
		if len(msg) < nl.SizeofNfgenmsg {
			continue
		}
		parsed, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
		if err != nil {
			return nil, fmt.Errorf("reading an nf_tables message: %w", err)
		}
		var as []nlAttr
		for _, a := range parsed {
			as = append(as, nlAttr{typ: a.Attr.Type & nl.NLA_TYPE_MASK, value: a.Value})
		}
		out = append(out, as)
	}
	return out, nil
}

// request runs one nf_tables request of msgType for the lister's family,
// with flags and attrs, and returns the messages of the answer. found is
// false when the kernel answers ENOENT: what was asked for is missing (a
// dump of a missing table or set says so too).
func (l *NetlinkLister) request(msgType, flags int, attrs ...*nl.RtAttr) (msgs [][]byte, found bool, err error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|msgType, flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: l.family, Version: nl.NFNETLINK_V0})
	for _, a := range attrs {
		req.AddData(a)
	}
	msgs, err = req.Execute(unix.NETLINK_NETFILTER, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	return msgs, err == nil, err
}

// exists asks the kernel for one object of the table by name: msgType is
// its get message (NFT_MSG_GETCHAIN, NFT_MSG_GETSET), tableAttr and
// nameAttr the attributes naming its table and itself.
func (l *NetlinkLister) exists(msgType, tableAttr, nameAttr int, name string) (bool, error) {
	msgs, found, err := l.request(msgType, unix.NLM_F_ACK,
		nl.NewRtAttr(tableAttr, nl.ZeroTerminated(l.table)), nl.NewRtAttr(nameAttr, nl.ZeroTerminated(name)))
	return found && len(msgs) > 0, err
}

type nlAttr struct {
	typ   uint16
	value []byte
}

func attrString(as []nlAttr, typ uint16) string {
	for _, a := range as {
		if a.typ == typ {
			return string(trimNUL(a.value))
		}
	}
	return ""
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// Names implements Lister.
func (l *NetlinkLister) Names(context.Context) ([]string, []string, error) {
	var chains, sets []string
	msgs, err := l.dump(unix.NFT_MSG_GETCHAIN)
	if err != nil {
		return nil, nil, fmt.Errorf("listing nftables chains over netlink: %w", err)
	}
	for _, as := range msgs {
		if attrString(as, unix.NFTA_CHAIN_TABLE) == l.table {
			chains = append(chains, attrString(as, unix.NFTA_CHAIN_NAME))
		}
	}
	msgs, err = l.dump(unix.NFT_MSG_GETSET, nl.NewRtAttr(unix.NFTA_SET_TABLE, nl.ZeroTerminated(l.table)))
	if err != nil {
		return nil, nil, fmt.Errorf("listing nftables sets over netlink: %w", err)
	}
	for _, as := range msgs {
		if attrString(as, unix.NFTA_SET_TABLE) != l.table {
			continue
		}
		var flags uint32
		for _, a := range as {
			if a.typ == unix.NFTA_SET_FLAGS && len(a.value) == 4 {
				flags = uint32(a.value[0])<<24 | uint32(a.value[1])<<16 | uint32(a.value[2])<<8 | uint32(a.value[3])
			}
		}
		if flags&(unix.NFT_SET_ANONYMOUS|unix.NFT_SET_MAP) != 0 {
			continue // anonymous sets belong to rules; maps are listed by nft as maps
		}
		sets = append(sets, attrString(as, unix.NFTA_SET_NAME))
	}
	return chains, sets, nil
}

// RuleCount implements Lister: a rule dump of one chain, which the kernel
// serves from its chain hash table.
func (l *NetlinkLister) RuleCount(_ context.Context, chain string) (int, error) {
	// The chain must exist: a dump of a missing one answers nothing.
	exists, err := l.exists(unix.NFT_MSG_GETCHAIN, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME, chain)
	if err != nil {
		return 0, fmt.Errorf("reading nftables chain %s over netlink: %w", chain, err)
	}
	if !exists {
		return -1, nil
	}
	msgs, err := l.dump(unix.NFT_MSG_GETRULE,
		nl.NewRtAttr(unix.NFTA_RULE_TABLE, nl.ZeroTerminated(l.table)),
		nl.NewRtAttr(unix.NFTA_RULE_CHAIN, nl.ZeroTerminated(chain)))
	if err != nil {
		return 0, fmt.Errorf("listing the rules of nftables chain %s over netlink: %w", chain, err)
	}
	n := 0
	for _, as := range msgs {
		if attrString(as, unix.NFTA_RULE_TABLE) == l.table && attrString(as, unix.NFTA_RULE_CHAIN) == chain {
			n++
		}
	}
	return n, nil
}

// Generation implements GenerationReader: one NFT_MSG_GETGEN request.
func (l *NetlinkLister) Generation(context.Context) (uint32, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETGEN, unix.NLM_F_ACK)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.NFPROTO_UNSPEC, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the nf_tables generation over netlink: %w", err)
	}
	for _, msg := range msgs {
		if len(msg) < nl.SizeofNfgenmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
		if err != nil {
			return 0, fmt.Errorf("reading the nf_tables generation: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == unix.NFTA_GEN_ID && len(a.Value) == 4 {
				return binary.BigEndian.Uint32(a.Value), nil
			}
		}
	}
	return 0, errors.New("the kernel's answer to NFT_MSG_GETGEN holds no generation")
}

// ElementCount implements Lister: a dump of the set's elements, counted
// as they arrive; its cost grows with the elements (the mode runs it only
// when the generation says someone else wrote).
func (l *NetlinkLister) ElementCount(_ context.Context, name string, _ bool) (int, error) {
	// A dump of a missing set fails with ENOENT, which dump turns into no
	// messages; a set that exists answers at least its header.
	exists, err := l.exists(unix.NFT_MSG_GETSET, unix.NFTA_SET_TABLE, unix.NFTA_SET_NAME, name)
	if err != nil {
		return -1, fmt.Errorf("reading nftables set %s over netlink: %w", name, err)
	}
	if !exists {
		return -1, nil
	}
	msgs, found, err := l.request(unix.NFT_MSG_GETSETELEM, unix.NLM_F_DUMP,
		nl.NewRtAttr(unix.NFTA_SET_ELEM_LIST_TABLE, nl.ZeroTerminated(l.table)),
		nl.NewRtAttr(unix.NFTA_SET_ELEM_LIST_SET, nl.ZeroTerminated(name)))
	if err != nil {
		return 0, fmt.Errorf("listing the elements of nftables set %s over netlink: %w", name, err)
	}
	if !found {
		return -1, nil
	}
	n := 0
	for _, msg := range msgs {
		if len(msg) < nl.SizeofNfgenmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
		if err != nil {
			return 0, fmt.Errorf("reading the elements of nftables set %s: %w", name, err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			n += countAttrs(a.Value)
		}
	}
	return n, nil
}

// countAttrs counts the attributes packed in b without copying them.
func countAttrs(b []byte) int {
	n := 0
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b))
		if l < unix.SizeofRtAttr || l > len(b) {
			break
		}
		n++
		b = b[min(len(b), (l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1)):]
	}
	return n
}
