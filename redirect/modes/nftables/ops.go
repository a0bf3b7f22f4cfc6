package nftables

import (
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/redirect/modes/nftables/rules"
)

// opKind is one kind of operation of a partial sync.
type opKind int

const (
	opFlushChain opKind = iota
	opAddChain
	opDeleteChain
	opAddRule
	opAddSet
	opDeleteSet
	opAddElem
	opDeleteElem
)

// op is one operation of a partial sync, before it is written as nft text
// or netlink messages.
type op struct {
	kind  opKind
	chain string
	rule  rules.Rule
	set   rules.AffinitySet
	elem  rules.Element
}

// write adds the operation to an nft transaction.
func (o op) write(tx *knftables.Transaction, addrType string) {
	switch o.kind {
	case opFlushChain:
		tx.Flush(&knftables.Chain{Name: o.chain})
	case opAddChain:
		tx.Add(&knftables.Chain{Name: o.chain})
	case opDeleteChain:
		tx.Delete(&knftables.Chain{Name: o.chain})
	case opAddRule:
		r := &knftables.Rule{Chain: o.chain, Rule: o.rule.Text}
		if o.rule.Comment != "" {
			r.Comment = knftables.PtrTo(o.rule.Comment)
		}
		tx.Add(r)
	case opAddSet:
		tx.Add(o.set.Object(addrType))
	case opDeleteSet:
		tx.Delete(&knftables.Set{Name: o.set.Name})
	case opAddElem:
		tx.Add(o.elem.Object())
	case opDeleteElem:
		tx.Delete(o.elem.Object())
	}
}

// text is the operation as one line of nft input, for error messages.
func (o op) text(addrType string, fam knftables.Family) string {
	tx := knftables.NewFake(fam, TableName).NewTransaction()
	o.write(tx, addrType)
	s := tx.String()
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	return s
}

// sizeEstimate is a generous size of the operation's netlink messages
// (a DNAT rule of 10 endpoints encodes in about 840 bytes, an element in
// 70 to 140), to fill a batch without encoding it first.
func (o op) sizeEstimate() int {
	switch o.kind {
	case opAddRule:
		n := 0
		if o.rule.DNAT != nil {
			n = len(o.rule.DNAT.Targets)
		}
		return 512 + len(o.rule.Text) + 64*n
	case opAddElem, opDeleteElem:
		return 192 + len(o.elem.Comment)
	}
	return 128
}
