package nftcompare

import (
	"fmt"
	"strings"
)

// UnifiedDiff returns a unified diff (3 lines of context) from a to b, empty
// when they are equal. Listings are a few thousand lines at most, so a plain
// longest-common-subsequence table is fast enough.
func UnifiedDiff(aName, bName, a, b string) string {
	if a == b {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	ops := diffOps(al, bl)
	const context = 3
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", aName, bName)
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from context lines before this change to context lines
		// after the last change that is at most 2*context lines away.
		start := max(0, i-context)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*context {
				break
			}
		}
		end = min(len(ops), end+context+1)
		aStart, bStart := ops[start].a, ops[start].b
		aCount, bCount := 0, 0
		var body strings.Builder
		for _, op := range ops[start:end] {
			body.WriteString(string(op.kind) + op.text + "\n")
			if op.kind != '+' {
				aCount++
			}
			if op.kind != '-' {
				bCount++
			}
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n%s", hunkRange(aStart, aCount), hunkRange(bStart, bCount), body.String())
		i = end
	}
	return sb.String()
}

// hunkRange writes a hunk's "start,count" (1-based; a zero count names the
// line before).
func hunkRange(start, count int) string {
	if count == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}

type diffOp struct {
	kind rune // ' ', '-', '+'
	text string
	a, b int // index of the line in a and b where the op happens
}

func diffOps(a, b []string) []diffOp {
	// lcs[i][j] = length of the LCS of a[i:] and b[j:].
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
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i], i, j})
			i, j = i+1, j+1
		case j < len(b) && (i == len(a) || lcs[i][j+1] > lcs[i+1][j]):
			ops = append(ops, diffOp{'+', b[j], i, j})
			j++
		default:
			ops = append(ops, diffOp{'-', a[i], i, j})
			i++
		}
	}
	return ops
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// ChangedLines returns the lines only a has ("-") and only b has ("+"),
// trimmed, in diff order.
func ChangedLines(a, b string) []string {
	var changed []string
	for _, op := range diffOps(splitLines(a), splitLines(b)) {
		if op.kind != ' ' {
			changed = append(changed, string(op.kind)+strings.TrimSpace(op.text))
		}
	}
	return changed
}
