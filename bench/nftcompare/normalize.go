package nftcompare

import (
	"fmt"
	"slices"
	"strings"
)

// Normalize rewrites one `nft list table` listing so that two listings of
// the same ruleset read alike whatever order they were created in. It
// changes only what is run-dependent:
//
//   - the order of the table's chains, sets, maps and other objects (nft
//     lists them in creation order, and kube-proxy creates service chains in
//     Go map order): they are sorted by kind and name;
//   - the order of set and map elements (hash sets list in hash order): they
//     are sorted and written one per line;
//   - the elements of dynamic sets (ClientIP affinity entries added by
//     traffic, with their expiry countdowns): they are dropped;
//   - counter values (packets/bytes): they are zeroed;
//   - empty chains nothing jumps to: kube-proxy flushes the chains of a
//     removed service at once but deletes them only at its next sync at
//     least a second later, which may be an hour away, so whether they are
//     still listed depends on how the changes were spread over syncs.
//
// Everything else (rule order inside a chain, each line's text, the set and
// map declarations) is kept as nft printed it, with indentation rewritten to
// tabs. A listing Normalize cannot read (unbalanced braces or quotes) is an
// error, not a guess.
func Normalize(listing string) (string, error) {
	lines, err := logicalLines(listing)
	if err != nil {
		return "", err
	}
	var out []string
	var blocks []block
	var cur *block
	depth := 0
	for _, l := range lines {
		opens, closes := braceDelta(l)
		next := depth + opens - closes
		if next < 0 {
			return "", fmt.Errorf("unbalanced braces at %q", l)
		}
		switch {
		case depth == 0 || (depth == 1 && next == 0):
			out = append(out, l) // "table ip kube-proxy {" and its "}"
		case depth == 1 && next > 1:
			cur = &block{header: l}
		case depth == 1:
			out = append(out, "\t"+l) // a table-level line (comment, flags)
		case next == 1:
			blocks = append(blocks, *cur) // the block's closing brace
			cur = nil
		default:
			cur.body = append(cur.body, l)
		}
		depth = next
	}
	if depth != 0 {
		return "", fmt.Errorf("unbalanced braces: listing ends at depth %d", depth)
	}
	if len(out) == 0 {
		return "", nil
	}
	blocks = withoutUnusedEmptyChains(blocks)
	slices.SortStableFunc(blocks, func(a, b block) int { return strings.Compare(a.key(), b.key()) })
	tail := out[len(out)-1] // the table's closing brace
	out = out[:len(out)-1]
	for i, b := range blocks {
		if i > 0 || len(out) > 1 {
			out = append(out, "")
		}
		out = append(out, b.render()...)
	}
	out = append(out, tail)
	return strings.Join(out, "\n") + "\n", nil
}

// withoutUnusedEmptyChains drops the chains without rules that no other
// object of the table names.
func withoutUnusedEmptyChains(blocks []block) []block {
	var all strings.Builder
	for _, b := range blocks {
		all.WriteString(b.header + "\n")
		for _, l := range b.body {
			all.WriteString(l + "\n")
		}
	}
	text := all.String()
	return slices.DeleteFunc(blocks, func(b block) bool {
		f := strings.Fields(b.header)
		if len(b.body) > 0 || len(f) < 2 || f[0] != "chain" {
			return false
		}
		// Its own header names it once; a jump, goto or map element
		// would name it again.
		return strings.Count(text, f[1]) == 1
	})
}

// block is one chain, set, map (or other object) of the table.
type block struct {
	header string   // "chain services {"
	body   []string // its lines, without the closing brace
}

// key sorts blocks: by kind, then name.
func (b block) key() string {
	f := strings.Fields(b.header)
	if len(f) >= 2 {
		return f[0] + " " + f[1]
	}
	return b.header
}

func (b block) render() []string {
	dynamic := false
	for _, l := range b.body {
		if strings.HasPrefix(l, "flags ") && strings.Contains(l, "dynamic") {
			dynamic = true
		}
	}
	out := []string{"\t" + b.header}
	for _, l := range b.body {
		if rest, ok := strings.CutPrefix(l, "elements = {"); ok {
			if dynamic {
				continue
			}
			elems := splitElements(strings.TrimSuffix(strings.TrimSpace(rest), "}"))
			slices.Sort(elems)
			out = append(out, "\t\telements = {")
			for _, e := range elems {
				out = append(out, "\t\t\t"+zeroCounters(e)+",")
			}
			out = append(out, "\t\t}")
			continue
		}
		out = append(out, "\t\t"+zeroCounters(l))
	}
	return append(out, "\t}")
}

// logicalLines splits a listing into trimmed lines, joining an `elements =
// { … }` list that nft wraps over several lines into one, and dropping blank
// lines.
func logicalLines(listing string) ([]string, error) {
	var lines []string
	var pending strings.Builder
	for _, raw := range strings.Split(listing, "\n") {
		l := strings.TrimSpace(raw)
		if pending.Len() > 0 {
			pending.WriteString(" " + l)
			if o, c := braceDelta(pending.String()); o == c {
				lines = append(lines, pending.String())
				pending.Reset()
			}
			continue
		}
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "elements = {") {
			if o, c := braceDelta(l); o != c {
				pending.WriteString(l)
				continue
			}
		}
		lines = append(lines, l)
	}
	if pending.Len() > 0 {
		return nil, fmt.Errorf("unterminated element list %q", pending.String())
	}
	return lines, nil
}

// braceDelta counts the braces of a line outside double-quoted strings.
func braceDelta(l string) (opens, closes int) {
	quoted := false
	for _, r := range l {
		switch {
		case r == '"':
			quoted = !quoted
		case quoted:
		case r == '{':
			opens++
		case r == '}':
			closes++
		}
	}
	return opens, closes
}

// splitElements splits an element list on the commas outside quotes.
func splitElements(s string) []string {
	var elems []string
	var cur strings.Builder
	quoted := false
	flush := func() {
		if e := strings.Join(strings.Fields(cur.String()), " "); e != "" {
			elems = append(elems, e)
		}
		cur.Reset()
	}
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			flush()
			continue
		}
		cur.WriteRune(r)
	}
	flush()
	return elems
}

// zeroCounters replaces the values of `counter packets N bytes M`.
func zeroCounters(l string) string {
	f := strings.Fields(l)
	changed := false
	for i := 0; i+4 < len(f); i++ {
		if f[i] == "counter" && f[i+1] == "packets" && f[i+3] == "bytes" {
			f[i+2], f[i+4] = "0", "0"
			changed = true
		}
	}
	if !changed {
		return l
	}
	return strings.Join(f, " ")
}
