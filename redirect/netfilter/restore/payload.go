package restore

// Payload is an iptables-restore --noflush input under construction, one
// section per table. A section renders, in this order: its declared chains
// (":NAME - [0:0]" creates a chain or empties it, so a declared chain is
// rewritten whole and no other chain changes), the chains it removes
// (declared too, as nf_tables refuses to delete a chain that still has
// rules), its rule lines in the order added, the "-X" of each removed
// chain, and COMMIT. Tables come in the order NewPayload was given, then
// in the order first written to; a table with nothing in it is left out.
type Payload struct {
	sections []*section
	chains   int
}

type section struct {
	table   string
	declare []string
	remove  []string
	lines   []ruleLine
}

// ruleLine is "-A CHAIN RULE", "-I CHAIN 1 RULE" or "-D CHAIN RULE", kept
// in pieces: rendering writes them straight into the payload instead of
// building a string per line.
type ruleLine struct {
	op, chain, rule string
	words           []string // rendered by JoinRule in place of rule, when set
}

// NewPayload returns an empty payload whose tables come in tableOrder.
func NewPayload(tableOrder ...string) *Payload {
	p := &Payload{sections: make([]*section, len(tableOrder))}
	for i, t := range tableOrder {
		p.sections[i] = &section{table: t}
	}
	return p
}

func (p *Payload) section(table string) *section {
	for _, s := range p.sections {
		if s.table == table {
			return s
		}
	}
	s := &section{table: table}
	p.sections = append(p.sections, s)
	return s
}

// Declare creates chain, or empties it when it exists.
func (p *Payload) Declare(table, chain string) {
	s := p.section(table)
	s.declare = append(s.declare, chain)
	p.chains++
}

// WriteChain declares chain and appends rules to it: the chain ends up
// holding exactly rules. Each rule is the text after "-A CHAIN ".
func (p *Payload) WriteChain(table, chain string, rules []string) {
	p.Declare(table, chain)
	s := p.section(table)
	for _, r := range rules {
		s.lines = append(s.lines, ruleLine{op: "-A ", chain: chain, rule: r})
	}
}

// Append appends rule to chain ("-A").
func (p *Payload) Append(table, chain, rule string) { p.line(table, "-A ", chain, rule) }

// AppendWords appends the rule made of words to chain, rendered as JoinRule
// renders them (without building the line first).
func (p *Payload) AppendWords(table, chain string, words []string) {
	s := p.section(table)
	s.lines = append(s.lines, ruleLine{op: "-A ", chain: chain, words: words})
}

// Insert inserts rule at the top of chain ("-I CHAIN 1").
func (p *Payload) Insert(table, chain, rule string) { p.line(table, opInsert, chain, rule) }

const opInsert = "-I "

// Delete deletes the first rule of chain equal to rule ("-D").
func (p *Payload) Delete(table, chain, rule string) { p.line(table, "-D ", chain, rule) }

// DeleteSaved deletes a rule as iptables-save printed it.
func (p *Payload) DeleteSaved(table string, r SavedRule) {
	p.Delete(table, r.Chain, r.Spec())
}

func (p *Payload) line(table, op, chain, rule string) {
	s := p.section(table)
	s.lines = append(s.lines, ruleLine{op: op, chain: chain, rule: rule})
}

// Remove flushes and deletes chain, after the section's rule lines (which
// delete the rules jumping to it).
func (p *Payload) Remove(table, chain string) {
	s := p.section(table)
	s.remove = append(s.remove, chain)
	p.chains++
}

// Chains counts the chains declared or removed: what a restore costs on
// nf_tables, whose transactions grow with the square of it.
func (p *Payload) Chains() int { return p.chains }

// Empty says whether the payload would change nothing.
func (p *Payload) Empty() bool {
	for _, s := range p.sections {
		if !s.empty() {
			return false
		}
	}
	return true
}

func (s *section) empty() bool { return len(s.declare) == 0 && len(s.lines) == 0 && len(s.remove) == 0 }

// Merge adds q's content after p's, table by table.
func (p *Payload) Merge(q *Payload) {
	for _, qs := range q.sections {
		if qs.empty() {
			continue
		}
		s := p.section(qs.table)
		s.declare = append(s.declare, qs.declare...)
		s.lines = append(s.lines, qs.lines...)
		s.remove = append(s.remove, qs.remove...)
	}
	p.chains += q.chains
}

// Bytes renders the payload.
func (p *Payload) Bytes() []byte { return p.AppendTo(make([]byte, 0, p.size())) }

// String renders the payload.
func (p *Payload) String() string { return string(p.Bytes()) }

const declared = " - [0:0]\n"

// size is the rendered length, or close above it, so Bytes allocates once.
func (p *Payload) size() int {
	n := 0
	for _, s := range p.sections {
		if s.empty() {
			continue
		}
		n += len(s.table) + len("*\nCOMMIT\n")
		for _, c := range s.declare {
			n += 1 + len(c) + len(declared)
		}
		for _, c := range s.remove {
			n += 1 + len(c) + len(declared) + len("-X \n") + len(c)
		}
		for _, l := range s.lines {
			n += len(l.op) + len(l.chain) + len("\n")
			if l.rule != "" {
				n += 1 + len(l.rule)
			}
			// Words are estimated, not measured (a second pass over every
			// byte costs more than the rare regrowth): one space each and
			// room for a quoted comment.
			for _, w := range l.words {
				n += 1 + len(w)
			}
			if len(l.words) > 0 {
				n += 8
			}
			if l.op == opInsert {
				n += len(" 1")
			}
		}
	}
	return n
}

// AppendTo appends the rendered payload to dst.
func (p *Payload) AppendTo(dst []byte) []byte {
	for _, s := range p.sections {
		if s.empty() {
			continue
		}
		dst = append(dst, '*')
		dst = append(dst, s.table...)
		dst = append(dst, '\n')
		for _, c := range s.declare {
			dst = appendDeclare(dst, c)
		}
		for _, c := range s.remove {
			dst = appendDeclare(dst, c)
		}
		for _, l := range s.lines {
			dst = append(dst, l.op...)
			dst = append(dst, l.chain...)
			if l.op == opInsert {
				dst = append(dst, " 1"...)
			}
			if l.rule != "" {
				dst = append(dst, ' ')
				dst = append(dst, l.rule...)
			}
			if len(l.words) > 0 {
				dst = append(dst, ' ')
				dst = appendJoined(dst, l.words)
			}
			dst = append(dst, '\n')
		}
		for _, c := range s.remove {
			dst = append(dst, "-X "...)
			dst = append(dst, c...)
			dst = append(dst, '\n')
		}
		dst = append(dst, "COMMIT\n"...)
	}
	return dst
}

func appendDeclare(dst []byte, chain string) []byte {
	dst = append(dst, ':')
	dst = append(dst, chain...)
	return append(dst, declared...)
}

// Chunks splits a large restore into several payloads of at most Max
// chains each (Max <= 0: one payload), for nf_tables, where one
// transaction's cost grows with the square of the chains it declares. The
// caller orders what it writes so every state between two chunks is
// consistent.
type Chunks struct {
	max        int
	tableOrder []string
	payloads   []*Payload
}

// NewChunks returns Chunks of at most max chains whose payloads order
// tables as tableOrder, holding one empty payload.
func NewChunks(max int, tableOrder ...string) *Chunks {
	c := &Chunks{max: max, tableOrder: tableOrder}
	c.payloads = []*Payload{NewPayload(tableOrder...)}
	return c
}

// Current is the payload being filled.
func (c *Chunks) Current() *Payload { return c.payloads[len(c.payloads)-1] }

// Fit returns the payload to write n more chains to: the current one, or a
// new one when they would take a non-empty current one over the limit. A
// group of chains larger than the limit still goes in one payload.
func (c *Chunks) Fit(n int) *Payload {
	if cur := c.Current(); c.max > 0 && cur.chains > 0 && cur.chains+n > c.max {
		return c.Next()
	}
	return c.Current()
}

// Next starts a new payload.
func (c *Chunks) Next() *Payload {
	p := NewPayload(c.tableOrder...)
	c.payloads = append(c.payloads, p)
	return p
}

// Split says whether the chunks are limited at all (Max > 0).
func (c *Chunks) Split() bool { return c.max > 0 }

// Payloads returns the payloads in order, empty ones included.
func (c *Chunks) Payloads() []*Payload { return c.payloads }
