package ipvsref

import (
	"fmt"
	"strings"

	"kproxy.dev/kproxy/bench/testkit"
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
	ops := testkit.AlignLines(a, b)
	changed := false
	for _, op := range ops {
		if op.Kind != ' ' {
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
			if ops[j].Kind != ' ' {
				return true
			}
		}
		return false
	}
	var out strings.Builder
	skipped := false
	for i, op := range ops {
		if op.Kind == ' ' && !near(i) {
			if !skipped {
				out.WriteString("  ...\n")
				skipped = true
			}
			continue
		}
		skipped = false
		fmt.Fprintf(&out, "%c %s\n", op.Kind, op.Line)
	}
	return out.String()
}
