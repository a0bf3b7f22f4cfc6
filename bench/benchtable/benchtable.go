// Package benchtable is what the benchmark tables of bench/ share: the
// Markdown page (header lines, a table, notes), the table itself, number
// formats and the description of the machine a run measured on. The
// harnesses keep only what their own measurements need.
package benchtable

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Page renders header lines, a table and notes as Markdown: each line of
// the header and notes ends in a hard line break, and a blank line
// separates the three parts.
func Page(header []string, table string, notes []string) string {
	var b strings.Builder
	for _, h := range header {
		fmt.Fprintf(&b, "%s  \n", h)
	}
	if len(header) > 0 {
		b.WriteString("\n")
	}
	b.WriteString(table)
	if len(notes) > 0 {
		b.WriteString("\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "%s  \n", n)
		}
	}
	return b.String()
}

// Table is a Markdown table.
type Table struct {
	Header []string
	// Right marks the right-aligned columns; nil aligns the first column
	// left and the others right (a name, then numbers).
	Right []bool
	Rows  [][]string
	// Pad pads the cells so that the columns line up in the text too.
	Pad bool
}

// Markdown renders the table, a missing cell as empty.
func (t Table) Markdown() string {
	right := t.Right
	if right == nil {
		right = make([]bool, len(t.Header))
		for i := 1; i < len(right); i++ {
			right[i] = true
		}
	}
	width := make([]int, len(t.Header))
	if t.Pad {
		for i, h := range t.Header {
			width[i] = max(3, utf8.RuneCountInString(h))
		}
		for _, r := range t.Rows {
			for i := range min(len(r), len(width)) {
				width[i] = max(width[i], utf8.RuneCountInString(r[i]))
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for i := range t.Header {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			pad := strings.Repeat(" ", max(0, width[i]-utf8.RuneCountInString(c)))
			if right[i] {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		b.WriteString("\n")
	}
	line(t.Header)
	b.WriteString("|")
	for i, w := range width {
		switch {
		case !t.Pad && right[i]:
			b.WriteString("---:|")
		case !t.Pad:
			b.WriteString("---|")
		case right[i]:
			b.WriteString(" " + strings.Repeat("-", w-1) + ": |")
		default:
			b.WriteString(" " + strings.Repeat("-", w) + " |")
		}
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		line(r)
	}
	return b.String()
}

// Thousands writes an integer with comma separators: 18300 -> "18,300".
func Thousands[T ~int | ~int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// Services writes a service count: "1 service", "10,000 services".
func Services(n int) string {
	if n == 1 {
		return "1 service"
	}
	return Thousands(n) + " services"
}

// Mark is a target's verdict: ✓ met, ✗ missed.
func Mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// Median is the median of vs (the mean of the middle two for an even
// count), 0 for none: a benchmark's figure from its repeated runs.
func Median[T ~float64 | ~int64](vs []T) T {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// CPUModel is /proc/cpuinfo's first model name.
func CPUModel() string {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(info)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// KernelRelease is the running kernel's release ("6.12.48").
func KernelRelease() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(data))
}

// Machine describes this machine in one line: "CPU model, 2 CPUs, Linux
// 6.12.48, go1.26.0".
func Machine() string {
	return fmt.Sprintf("%s, %d CPUs, Linux %s, %s", CPUModel(), runtime.NumCPU(), KernelRelease(), runtime.Version())
}

// LoadAverage is /proc/loadavg's first three fields (1, 5 and 15 minutes):
// the machine's load, shared with other work, next to a measurement.
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// FirstLineOf runs a command (a tool's --version) and returns the first
// line of its output, or what went wrong.
func FirstLineOf(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(%s: %v)", name, err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
