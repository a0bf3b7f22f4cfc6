package nftcompare

import (
	"fmt"
	"strings"

	"kproxy.dev/kproxy/bench/testkit"
)

// UnifiedDiff returns a unified diff (3 lines of context) from a to b, empty
// when they are equal. Listings are a few thousand lines at most, so a plain
// longest-common-subsequence table is fast enough.
func UnifiedDiff(aName, bName, a, b string) string {
	if a == b {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	ops := testkit.AlignLines(al, bl)
	const context = 3
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", aName, bName)
	for i := 0; i < len(ops); {
		if ops[i].Kind == ' ' {
			i++
			continue
		}
		// A hunk: from context lines before this change to context lines
		// after the last change that is at most 2*context lines away.
		start := max(0, i-context)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].Kind != ' ' {
				end = j
			} else if j-end > 2*context {
				break
			}
		}
		end = min(len(ops), end+context+1)
		aStart, bStart := ops[start].A, ops[start].B
		aCount, bCount := 0, 0
		var body strings.Builder
		for _, op := range ops[start:end] {
			body.WriteString(string(op.Kind) + op.Line + "\n")
			if op.Kind != '+' {
				aCount++
			}
			if op.Kind != '-' {
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

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// ChangedLines returns the lines only a has ("-") and only b has ("+"),
// trimmed, in diff order.
func ChangedLines(a, b string) []string {
	if a == b {
		return nil
	}
	var changed []string
	for _, op := range testkit.AlignLines(splitLines(a), splitLines(b)) {
		if op.Kind != ' ' {
			changed = append(changed, string(op.Kind)+strings.TrimSpace(op.Line))
		}
	}
	return changed
}
