package ipvsscale

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Table is a run's rows, one per size, rendered as Markdown.
type Table struct {
	// Header lines go above the table, Notes below it.
	Header, Notes []string
	Rows          []Row
}

// Markdown renders the header, the table and the notes. A row whose guest
// half did not report says so instead of leaving cells empty.
func (t *Table) Markdown() string {
	var b strings.Builder
	for _, h := range t.Header {
		fmt.Fprintf(&b, "%s  \n", h)
	}
	if len(t.Header) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("| service ports × endpoints | desired-state build (host) | full apply (guest) | one-endpoint change (guest)" +
		" | netlink ops for one change | ops for a no-change resync | periodic full resync, nothing changed (guest) |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range t.Rows {
		cells := []string{fmt.Sprintf("%s × %d", thousands(r.Ports), EndpointsPerPort), duration(r.Build)}
		if g := r.Guest; g != nil {
			cells = append(cells,
				fmt.Sprintf("%s (%s ops)", duration(g.FullSync), thousands(g.FullSyncOps)),
				fmt.Sprintf("%s (mean of %d)", duration(g.Change), g.Changes),
				mean(g.ChangeOps),
				thousands(g.NoChangeOps),
				fmt.Sprintf("%s (%s reads, %s ensures, %s writes)", duration(g.FullResync),
					thousands(g.FullResyncReads), thousands(g.FullResyncEnsures), thousands(g.FullResyncWrites)),
			)
		} else {
			cells = append(cells, "failed: see the benchmark log", "—", "—", "—", "—")
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	if len(t.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range t.Notes {
			fmt.Fprintf(&b, "%s  \n", n)
		}
	}
	return b.String()
}

// thousands writes n with comma separators: 130,021.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// mean writes an average as an integer when it is one, else to a tenth.
func mean(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// duration writes d with about three significant digits, in ms below a
// second and in s above.
func duration(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	case ms < 10_000:
		return fmt.Sprintf("%.2f s", ms/1000)
	case ms < 100_000:
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f s", ms/1000)
}
