package ipvsref

import (
	"fmt"
	"strings"
)

// Difference is one section whose lines differ between the two proxies.
type Difference struct {
	Section string
	Diff    string // LineDiff of kube-proxy's lines against kproxy's
}

// Compare returns the sections where kproxy's state (got) differs from
// kube-proxy's (want); a section only one side has counts as empty on the
// other.
func Compare(want, got []Section) []Difference {
	gotLines := map[string][]string{}
	for _, s := range got {
		gotLines[s.Name] = s.Lines
	}
	var diffs []Difference
	seen := map[string]bool{}
	for _, w := range want {
		seen[w.Name] = true
		if d := LineDiff(w.Lines, gotLines[w.Name]); d != "" {
			diffs = append(diffs, Difference{Section: w.Name, Diff: d})
		}
	}
	for _, g := range got {
		if !seen[g.Name] {
			if d := LineDiff(nil, g.Lines); d != "" {
				diffs = append(diffs, Difference{Section: g.Name, Diff: d})
			}
		}
	}
	return diffs
}

// LineDiff shows how b differs from a, line by line: "- " for a line only
// a has, "+ " for one only b has, with up to two unchanged lines of
// context around each change and "  ..." for what is left out. Equal
// inputs give "".
func LineDiff(a, b []string) string {
	ops := diffOps(a, b)
	changed := false
	for _, op := range ops {
		if op.kind != ' ' {
			changed = true
			break
		}
	}
	if !changed {
		return ""
	}
	const context = 2
	near := func(i int) bool {
		for j := max(0, i-context); j <= min(len(ops)-1, i+context); j++ {
			if ops[j].kind != ' ' {
				return true
			}
		}
		return false
	}
	var out strings.Builder
	skipped := false
	for i, op := range ops {
		if op.kind == ' ' && !near(i) {
			if !skipped {
				out.WriteString("  ...\n")
				skipped = true
			}
			continue
		}
		skipped = false
		fmt.Fprintf(&out, "%c %s\n", op.kind, op.line)
	}
	return out.String()
}

type diffOp struct {
	kind byte // ' ', '-' or '+'
	line string
}

// diffOps aligns a and b on a longest common subsequence of lines.
func diffOps(a, b []string) []diffOp {
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		ops = append(ops, diffOp{'-', a[i]})
	}
	for ; j < len(b); j++ {
		ops = append(ops, diffOp{'+', b[j]})
	}
	return ops
}
