package ipvsscale

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"
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
	tab := benchtable.Table{Header: []string{"service ports × endpoints", "desired-state build (host)", "full apply (guest)", "one-endpoint change (guest)",
		"netlink ops for one change", "ops for a no-change resync", "periodic full resync, nothing changed (guest)"}}
	for _, r := range t.Rows {
		cells := []string{fmt.Sprintf("%s × %d", benchtable.Thousands(r.Ports), EndpointsPerPort), duration(r.Build)}
		if g := r.Guest; g != nil {
			cells = append(cells,
				fmt.Sprintf("%s (%s ops)", duration(g.FullSync), benchtable.Thousands(g.FullSyncOps)),
				fmt.Sprintf("%s (mean of %d)", duration(g.Change), g.Changes),
				mean(g.ChangeOps),
				benchtable.Thousands(g.NoChangeOps),
				fmt.Sprintf("%s (%s reads, %s ensures, %s writes)", duration(g.FullResync),
					benchtable.Thousands(g.FullResyncReads), benchtable.Thousands(g.FullResyncEnsures), benchtable.Thousands(g.FullResyncWrites)),
			)
		} else {
			cells = append(cells, "failed: see the benchmark log", "—", "—", "—", "—")
		}
		tab.Rows = append(tab.Rows, cells)
	}
	return benchtable.Page(t.Header, tab.Markdown(), t.Notes)
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
