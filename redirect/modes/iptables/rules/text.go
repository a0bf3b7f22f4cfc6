package rules

import (
	"net/netip"
	"strconv"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// portText accumulates the text of one port's rules and chain names in a
// single buffer and turns it into strings with one allocation: each piece
// is a substring of one string. Rule text is written in iptables-save's
// canonical order (-s -d -p, then the matches, then -j).
type portText struct {
	buf   []byte
	ends  []int // ends[i] is where piece i stops in buf; piece i starts at ends[i-1]
	start int   // where the piece being written starts

	// Scratch reused between ports (portText values are pooled).
	chains    []chainDraft
	shared    []sharedDraft
	sepHashes [][hashLen]byte
}

// chainDraft is a Chain whose strings are still piece indices.
type chainDraft struct {
	table       Table
	name        int
	first, last int // rules are pieces first..last-1
}

// sharedDraft is a SharedRule whose rule is still a piece index.
type sharedDraft struct {
	table Table
	chain string
	rule  int
}

// maxPooledText bounds the buffers a pooled portText keeps, so one service
// with thousands of endpoints does not pin its buffers for good.
const maxPooledText = 1 << 16

func (t *portText) reset() {
	t.buf, t.ends, t.start = t.buf[:0], t.ends[:0], 0
	t.chains, t.shared, t.sepHashes = t.chains[:0], t.shared[:0], t.sepHashes[:0]
}

func (t *portText) poolable() bool { return cap(t.buf) <= maxPooledText }

// end closes the piece being written, dropping a trailing space, and
// returns its index.
func (t *portText) end() int {
	if n := len(t.buf); n > t.start && t.buf[n-1] == ' ' {
		t.buf = t.buf[:n-1]
	}
	t.ends = append(t.ends, len(t.buf))
	t.start = len(t.buf)
	return len(t.ends) - 1
}

// strings returns every piece, in order, as substrings of one string.
func (t *portText) strings() []string {
	all := string(t.buf)
	out := make([]string, len(t.ends))
	from := 0
	for i, to := range t.ends {
		out[i] = all[from:to]
		from = to
	}
	return out
}

func (t *portText) s(s string) *portText { t.buf = append(t.buf, s...); return t }

// word writes s and a separating space.
func (t *portText) word(s string) *portText {
	t.buf = append(t.buf, s...)
	t.buf = append(t.buf, ' ')
	return t
}

func (t *portText) uint(n uint64) *portText {
	t.buf = strconv.AppendUint(t.buf, n, 10)
	t.buf = append(t.buf, ' ')
	return t
}

// host writes a single address as iptables-save prints it, with its
// /32 or /128.
func (t *portText) host(a netip.Addr, hostBits string) *portText {
	t.buf = a.Unmap().AppendTo(t.buf)
	t.buf = append(t.buf, hostBits...)
	t.buf = append(t.buf, ' ')
	return t
}

func (t *portText) prefix(p netip.Prefix) *portText {
	t.buf = p.Masked().AppendTo(t.buf)
	t.buf = append(t.buf, ' ')
	return t
}

// openComment starts the comment match; its text is written straight into
// the buffer from the returned position, then closeComment quotes it as a
// whole by restore's quoting rule.
func (t *portText) openComment() int {
	t.buf = append(t.buf, "-m comment --comment "...)
	return len(t.buf)
}

func (t *portText) closeComment(start int) *portText {
	t.buf = append(restore.QuoteTail(t.buf, start), ' ')
	return t
}

// comment writes the comment match with the concatenation of parts.
func (t *portText) comment(parts ...string) *portText {
	start := t.openComment()
	for _, p := range parts {
		t.buf = append(t.buf, p...)
	}
	return t.closeComment(start)
}

// endpointComment writes the comment "<port> -> <endpoint>".
func (t *portText) endpointComment(name string, ep netip.AddrPort) *portText {
	start := t.openComment()
	t.buf = append(t.buf, name...)
	t.buf = append(t.buf, " -> "...)
	t.buf = kernelmode.AppendEndpoint(t.buf, ep)
	return t.closeComment(start)
}

func (t *portText) endpoint(ep netip.AddrPort) *portText {
	t.buf = kernelmode.AppendEndpoint(t.buf, ep)
	t.buf = append(t.buf, ' ')
	return t
}
