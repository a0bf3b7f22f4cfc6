package fakeiptables

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/internal/rulespec"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// txn applies one table's commands to a fork of the table, noting what the
// real tool would refuse where it would find out: iptables-nft-restore
// parses the whole section first (syntax errors stop it at once), then at
// COMMIT prepares the commands in order against its view of the table (the
// first one that names a missing chain, deletes a missing rule, ... fails
// the batch), and last the kernel refuses operations it cannot do (every
// refusal is reported).
type txn struct {
	fam  ipfamily.Family
	work *table
	// refused is the first command refused while preparing the batch.
	refused *refusal
	kernel  []kernelRefusal
}

// refusal is a command refused while preparing the batch.
type refusal struct {
	line int
	// msg is the tool's reason, e.g. "No chain/target/match by that name".
	msg string
	// missingChain is set for a rule jumping to a chain that does not exist
	// at that point; the tool reports it at the COMMIT line.
	missingChain string
}

func newTxn(fam ipfamily.Family, t *table) *txn { return &txn{fam: fam, work: t} }

// refuse records the first refusal; later commands are still parsed but no
// longer applied, since the batch is lost anyway.
func (x *txn) refuse(r refusal) {
	if x.refused == nil {
		x.refused = &r
	}
}

// finish returns how the tool reports the section ending at commitLine, or
// nil when it commits.
func (x *txn) finish(prog string, commitLine int) *failure {
	switch {
	case x.refused != nil && x.refused.missingChain != "":
		return parseFailure(prog, commitLine, fmt.Sprintf("Chain '%s' does not exist", x.refused.missingChain), false)
	case x.refused != nil:
		return commandFailure(prog, x.refused.line, x.refused.msg)
	case len(x.kernel) > 0:
		return kernelFailure(prog, x.kernel)
	}
	return nil
}

// verdict is finish for a single iptables command: its exit code (0 when
// it may commit) and the tool's reason, without line numbers.
func (x *txn) verdict() (int, string) {
	switch {
	case x.refused != nil && x.refused.missingChain != "":
		return 2, fmt.Sprintf("Chain '%s' does not exist", x.refused.missingChain)
	case x.refused != nil:
		return 1, x.refused.msg + "."
	case len(x.kernel) > 0:
		texts := make([]string, len(x.kernel))
		for i, k := range x.kernel {
			texts[i] = k.text
		}
		return 4, strings.Join(texts, "; ")
	}
	return 0, ""
}

// declare handles ":CHAIN POLICY [packets:bytes]". Counters are ignored.
func (x *txn) declare(line string, n int) *rulespec.Error {
	decl, ok := restore.ParseChainLine(line)
	if !ok {
		return &rulespec.Error{Msg: fmt.Sprintf("Bad argument `%s'", line), Bare: true}
	}
	if x.refused != nil {
		return nil
	}
	name, policy := decl.Name, decl.Policy
	c, exists := x.work.chains[name]
	switch {
	case exists && c.builtin:
		if policy != "ACCEPT" && policy != "DROP" {
			x.refuse(refusal{line: n, msg: "Bad policy name"})
			return nil
		}
		x.work.writable(name).policy = policy
	case policy != "-":
		// iptables-nft ignores a policy on a user chain; legacy refuses it.
		// The fake refuses it too: it is always a mistake.
		x.refuse(refusal{line: n, msg: "Bad built-in chain name"})
	case exists:
		x.work.flush(name)
	default:
		x.work.createChain(name)
	}
	return nil
}

// command handles one command line (-A, -I, -D, -F, -X, -N, -Z, -P).
func (x *txn) command(words []string, n int) *rulespec.Error {
	if len(words) == 0 {
		return nil
	}
	op := canonicalOp(words[0])
	if op == "" {
		return &rulespec.Error{Msg: fmt.Sprintf("Bad argument `%s'", words[0]), Bare: true}
	}
	if op == "-Z" {
		return nil
	}
	if len(words) < 2 {
		return &rulespec.Error{Msg: fmt.Sprintf("option \"%s\" requires an argument", words[0])}
	}
	name, rest := words[1], words[2:]
	switch op {
	case "-A", "-I", "-D":
		return x.ruleCommand(op, name, rest, n)
	case "-P":
		if len(rest) != 1 {
			return &rulespec.Error{Msg: "-P requires a chain and a policy"}
		}
	default:
		if len(rest) != 0 {
			return &rulespec.Error{Msg: fmt.Sprintf("Bad argument `%s'", rest[0]), Bare: true}
		}
	}
	if x.refused != nil {
		return nil
	}
	c, exists := x.work.chains[name]
	switch {
	case op == "-N" && exists:
		x.refuse(refusal{line: n, msg: "Chain already exists"})
	case op == "-N":
		x.work.createChain(name)
	case !exists && op == "-P":
		x.refuse(refusal{line: n, msg: "Bad built-in chain name"})
	case !exists:
		x.refuse(refusal{line: n, msg: "No chain/target/match by that name"})
	case op == "-F":
		x.work.flush(name)
	case op == "-P" && !c.builtin:
		x.refuse(refusal{line: n, msg: "Bad built-in chain name"})
	case op == "-P" && rest[0] != "ACCEPT" && rest[0] != "DROP":
		x.refuse(refusal{line: n, msg: "Bad policy name"})
	case op == "-P":
		x.work.writable(name).policy = rest[0]
	case op == "-X" && c.builtin:
		// iptables-nft accepts and ignores this; legacy refuses it. Always
		// a mistake, so the fake refuses it.
		x.refuse(refusal{line: n, msg: "Can't delete built-in chain"})
	case op == "-X":
		// The tool drops the chain from its view at once; the kernel then
		// refuses to delete a chain that holds or receives rules.
		if x.work.refs[name] > 0 || len(c.rules) > 0 {
			x.kernel = append(x.kernel, kernelRefusal{line: n, text: "CHAIN_DEL failed (Device or resource busy): chain " + name})
		}
		x.work.deleteChain(name)
	}
	return nil
}

func canonicalOp(w string) string {
	switch w {
	case "-A", "--append":
		return "-A"
	case "-I", "--insert":
		return "-I"
	case "-D", "--delete":
		return "-D"
	case "-F", "--flush":
		return "-F"
	case "-X", "--delete-chain":
		return "-X"
	case "-N", "--new-chain":
		return "-N"
	case "-Z", "--zero":
		return "-Z"
	case "-P", "--policy":
		return "-P"
	}
	return ""
}

// ruleCommand handles -A, -I [n] and -D (by rule or by number).
func (x *txn) ruleCommand(op, chainName string, words []string, n int) *rulespec.Error {
	pos, hasPos := 0, false
	if (op == "-I" || op == "-D") && len(words) > 0 {
		if p, err := strconv.Atoi(words[0]); err == nil {
			if p < 1 {
				return &rulespec.Error{Msg: fmt.Sprintf("Invalid rule number `%s'", words[0])}
			}
			pos, hasPos, words = p, true, words[1:]
		}
	}
	if op == "-D" && hasPos && len(words) > 0 {
		return &rulespec.Error{Msg: fmt.Sprintf("Bad argument `%s'", words[0]), Bare: true}
	}
	var r rule
	var parsed *rulespec.Rule
	if !(op == "-D" && hasPos) {
		var err error
		if parsed, err = rulespec.Parse(words, rulespec.Context{Family: x.fam, Table: x.work.name}); err != nil {
			return asSyntaxError(err)
		}
		r = rule{text: restore.JoinRule(words)}
		if parsed.Target.IsChain() {
			r.jumpsTo = parsed.Target.Name
		}
	}
	if x.refused != nil {
		return nil
	}
	c, exists := x.work.chains[chainName]
	if !exists {
		x.refuse(refusal{line: n, msg: "No chain/target/match by that name"})
		return nil
	}
	if op == "-D" {
		x.deleteRule(c, chainName, r, pos, n)
		return nil
	}
	if !hasPos {
		pos = 1
		if op == "-A" {
			pos = len(c.rules) + 1
		}
	}
	if pos > len(c.rules)+1 {
		x.refuse(refusal{line: n, msg: "Index of insertion too big"})
		return nil
	}
	if _, ok := x.work.chains[r.jumpsTo]; r.jumpsTo != "" && !ok {
		x.refuse(refusal{line: n, missingChain: r.jumpsTo})
		return nil
	}
	if !rulespec.TargetAllowedIn(parsed.Target.Name, x.work.name) {
		what := "RULE_APPEND"
		if op == "-I" {
			what = "RULE_INSERT"
		}
		x.kernel = append(x.kernel, kernelRefusal{line: n, text: what + " failed (Invalid argument): rule in chain " + chainName})
	}
	x.work.insert(chainName, pos-1, r)
	return nil
}

func (x *txn) deleteRule(c *chain, chainName string, r rule, pos, n int) {
	if pos > 0 {
		if pos > len(c.rules) {
			x.refuse(refusal{line: n, msg: "Index of deletion too big"})
			return
		}
		x.work.remove(chainName, pos-1)
		return
	}
	i := slices.IndexFunc(c.rules, func(have rule) bool { return have.text == r.text })
	if i < 0 {
		x.refuse(refusal{line: n, msg: "Bad rule (does a matching rule exist in that chain?)"})
		return
	}
	x.work.remove(chainName, i)
}

func asSyntaxError(err error) *rulespec.Error {
	var se *rulespec.Error
	if errors.As(err, &se) {
		return se
	}
	return &rulespec.Error{Msg: err.Error()}
}
