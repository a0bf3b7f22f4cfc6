package dataplane

import (
	"fmt"
	"math"
	"slices"

	"kproxy.dev/kproxy/bench/benchtable"
)

// Path is one way from the client to the backend.
type Path string

const (
	Direct Path = "direct"
	DNAT   Path = "dnat"
	// Kproxy is kproxy's userspace mode with REDIRECT portals (nat rules
	// steer service traffic to the relays' own ports).
	Kproxy Path = "kproxy"
	// KproxyLocal is the userspace mode with local portals: service
	// addresses made local by routes, the relays listening on them, no
	// netfilter rule on the node for the path.
	KproxyLocal Path = "kproxy-local"
	// KproxySKLookup is the userspace mode with socket-lookup portals:
	// service addresses made local by routes as for local portals, and a
	// BPF sk_lookup program on the node's network namespace handing their
	// service ports to one relay socket per protocol and family.
	KproxySKLookup Path = "kproxy-sklookup"
	// KproxyIPTables is kproxy in --proxy-mode=iptables: kernel DNAT from
	// kube-proxy's rule model. It runs in a table of its own (see
	// KproxyModeEnv), as kproxy's modes remove each other's rules at start.
	KproxyIPTables Path = "kproxy-iptables"
	// KproxyNFTables is kproxy in --proxy-mode=nftables: kernel DNAT from
	// kube-proxy's nftables ruleset (a verdict map of service addresses),
	// in a table of its own like the iptables mode.
	KproxyNFTables Path = "kproxy-nftables"
	IOCopy         Path = "iocopy"
	HAProxy        Path = "haproxy"
)

// Paths lists the paths in table column order.
func Paths() []Path {
	return []Path{Direct, DNAT, Kproxy, KproxyLocal, KproxySKLookup, IOCopy, HAProxy}
}

// Title is the path's column heading.
func (p Path) Title() string {
	switch p {
	case Direct:
		return "direct"
	case DNAT:
		return "iptables DNAT"
	case Kproxy:
		return "kproxy userspace, REDIRECT portals"
	case KproxyLocal:
		return "kproxy userspace, local portals"
	case KproxySKLookup:
		return "kproxy userspace, socket-lookup portals"
	case KproxyIPTables:
		return "kproxy iptables mode"
	case KproxyNFTables:
		return "kproxy nftables mode"
	case IOCopy:
		return "Go io.Copy relay"
	case HAProxy:
		return "HAProxy splice-auto"
	}
	return string(p)
}

// portalKind is the --userspace-portals kind a userspace kproxy path runs
// with, "" for the other paths.
func portalKind(p Path) string {
	switch p {
	case Kproxy:
		return "redirect"
	case KproxyLocal:
		return "local"
	case KproxySKLookup:
		return "sklookup"
	}
	return ""
}

// routesServiceAddresses says whether p's kproxy makes service addresses
// local with routes (proto 107 in the local table), which the harness waits
// for at start and removes should a stopped kproxy leave them.
func routesServiceAddresses(p Path) bool { return p == KproxyLocal || p == KproxySKLookup }

// Row is one measured quantity.
type Row struct {
	// ID names the sub-benchmark ("bulk-1-stream").
	ID    string
	Title string
	// Unit is the b.ReportMetric unit and the table's unit.
	Unit string
	// LowerIsBetter is set for latencies and memory.
	LowerIsBetter bool
	// Decimals is how many fraction digits the table shows.
	Decimals int
	// MinRatio, when set, is the subject's target as a fraction of DNAT's
	// value.
	MinRatio float64
	// MaxValue, when set, is the subject's target as an absolute ceiling.
	MaxValue float64
	// NoRatio leaves out the "% of DNAT" next to values (latencies, or rows
	// DNAT has no value for).
	NoRatio bool
}

// Table collects one run's values and renders them.
type Table struct {
	Rows []Row
	// Header lines (date, kernel, CPU, settings), printed above the table.
	Header []string
	// Notes are printed below it.
	Notes []string
	// Extra columns after Paths(): proxies added for a comparison run (see
	// KPROXY_DATAPLANE_EXTRA); none in a normal run.
	Extra []Path
	// Columns, when set, replaces Paths() and Extra as the columns.
	Columns []Path
	// Subject is the path the target and HAProxy columns judge; "" means
	// Kproxy.
	Subject Path
	values  map[string]map[Path]float64
	notes   map[string]map[Path]string
}

// Annotate attaches a remark to the value of row for path, shown in its cell.
func (t *Table) Annotate(row string, p Path, note string) {
	if t.notes == nil {
		t.notes = map[string]map[Path]string{}
	}
	if t.notes[row] == nil {
		t.notes[row] = map[Path]string{}
	}
	t.notes[row][p] = note
}

// Set records the value of row for path.
func (t *Table) Set(row string, p Path, v float64) {
	if t.values == nil {
		t.values = map[string]map[Path]float64{}
	}
	if t.values[row] == nil {
		t.values[row] = map[Path]float64{}
	}
	t.values[row][p] = v
}

// Get returns the value of row for path, if measured.
func (t *Table) Get(row string, p Path) (float64, bool) {
	v, ok := t.values[row][p]
	return v, ok
}

// Ratio returns path's value over DNAT's for row.
func (t *Table) Ratio(row string, p Path) (float64, bool) {
	v, ok := t.Get(row, p)
	d, dok := t.Get(row, DNAT)
	if !ok || !dok || d == 0 {
		return 0, false
	}
	return v / d, true
}

// Markdown renders the header, the table and the notes.
func (t *Table) Markdown() string {
	columns := t.Columns
	if columns == nil {
		columns = append(Paths(), t.Extra...)
	}
	withHAProxy := slices.Contains(columns, HAProxy)
	label := "kproxy REDIRECT"
	if t.subject() != Kproxy {
		label = t.subject().Title()
	}
	tab := benchtable.Table{Header: []string{"measurement"}, Right: []bool{false}}
	for _, p := range columns {
		tab.Header, tab.Right = append(tab.Header, p.Title()), append(tab.Right, true)
	}
	tab.Header, tab.Right = append(tab.Header, label+" target"), append(tab.Right, false)
	if withHAProxy {
		tab.Header, tab.Right = append(tab.Header, label+" vs HAProxy"), append(tab.Right, false)
	}
	for _, r := range t.Rows {
		row := []string{fmt.Sprintf("%s (%s)", r.Title, r.Unit)}
		for _, p := range columns {
			row = append(row, t.cell(r, p))
		}
		row = append(row, t.target(r))
		if withHAProxy {
			row = append(row, t.versusHAProxy(r))
		}
		tab.Rows = append(tab.Rows, row)
	}
	return benchtable.Page(t.Header, tab.Markdown(), t.Notes)
}

func (t *Table) cell(r Row, p Path) string {
	v, ok := t.Get(r.ID, p)
	if !ok {
		return "—"
	}
	s := formatValue(v, r.Decimals)
	if ratio, ok := t.Ratio(r.ID, p); ok && !r.NoRatio && p != DNAT {
		s += fmt.Sprintf(" (%.0f%%)", 100*ratio)
	}
	if note := t.notes[r.ID][p]; note != "" {
		s += " [" + note + "]"
	}
	return s
}

func (t *Table) subject() Path {
	if t.Subject == "" {
		return Kproxy
	}
	return t.Subject
}

// target says whether the subject met the row's target, with the number it
// is judged on.
func (t *Table) target(r Row) string {
	switch {
	case r.MinRatio > 0:
		ratio, ok := t.Ratio(r.ID, t.subject())
		if !ok {
			return fmt.Sprintf("≥ %.0f%% of DNAT: not measured", 100*r.MinRatio)
		}
		return fmt.Sprintf("≥ %.0f%% of DNAT: %.0f%% %s", 100*r.MinRatio, 100*ratio, benchtable.Mark(ratio >= r.MinRatio))
	case r.MaxValue > 0:
		v, ok := t.Get(r.ID, t.subject())
		if !ok {
			return fmt.Sprintf("≤ %s: not measured", formatValue(r.MaxValue, r.Decimals))
		}
		return fmt.Sprintf("≤ %s: %s %s", formatValue(r.MaxValue, r.Decimals), formatValue(v, r.Decimals), benchtable.Mark(v <= r.MaxValue))
	}
	return ""
}

func (t *Table) versusHAProxy(r Row) string {
	k, kok := t.Get(r.ID, t.subject())
	h, hok := t.Get(r.ID, HAProxy)
	if !kok || !hok || h == 0 {
		return "—"
	}
	if k == h {
		return "even (1.00×)"
	}
	ahead := k > h
	if r.LowerIsBetter {
		ahead = k < h
	}
	word := "behind"
	if ahead {
		word = "ahead"
	}
	return fmt.Sprintf("%s (%.2f×) %s", word, k/h, benchtable.Mark(ahead))
}

func formatValue(v float64, decimals int) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%.*f", decimals, v)
}
