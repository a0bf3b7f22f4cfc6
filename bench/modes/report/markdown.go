package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	"kproxy.dev/kproxy/bench/modes"
)

// Markdown renders a run as the Markdown page people read
// (bench-modes.md): when, where and how it ran, then per section (host
// first, then the guest's, whose figures are ratios within the guest
// only) a control-plane table, a data-plane table and the section's notes.
func Markdown(run modes.Run) string {
	var b strings.Builder
	fn := &footnotes{labels: map[string]string{}}
	b.WriteString("# Every proxy mode side by side\n\n")
	writeHeader(&b, run)
	for _, s := range orderedSections(run) {
		writeSection(&b, run, s, fn)
	}
	writePlotLinks(&b, run)
	return b.String()
}

// writePlotLinks shows the figures bench/analysis draws next to the page,
// by their fixed names (the PNG inline, the SVG linked).
func writePlotLinks(b *strings.Builder, run modes.Run) {
	b.WriteString("## Plots\n\n")
	links := []struct{ name, alt string }{
		{PlotLatency, "One-change and new-service latency against service count, per mode"},
		{PlotNewConn, "New connections per second against service count, per mode"},
		{PlotRatios, "Data-plane rates as ratios to DNAT at the smallest service count, per mode and workload"},
	}
	if _, ok := FindSection(run, modes.SectionGuest); ok {
		links = append(links, struct{ name, alt string }{PlotRatiosGuest, "Guest kernel: data-plane rates as ratios to DNAT in the guest"})
	}
	for _, l := range links {
		fmt.Fprintf(b, "![%s](%s.png) ([SVG](%s.svg))\n\n", l.alt, l.name, l.name)
	}
}

func writeHeader(b *strings.Builder, run modes.Run) {
	m := run.Machine
	started := "unknown date"
	if !run.Started.IsZero() {
		started = run.Started.UTC().Format("2006-01-02 15:04 MST")
	}
	fmt.Fprintf(b, "- **Run:** %s, took %s\n", started, fmtDuration(run.TookSeconds))
	machine := "Linux " + orUnknown(m.Kernel)
	if m.CPUs > 0 {
		machine += fmt.Sprintf(", %d CPUs", m.CPUs)
	}
	if m.CPUModel != "" {
		machine += " (" + m.CPUModel + ")"
	}
	machine += fmt.Sprintf("; load average %s before, %s after", orUnknown(m.LoadBefore), orUnknown(m.LoadAfter))
	fmt.Fprintf(b, "- **Machine:** %s\n", machine)
	cmd := fmt.Sprintf("`%s` at commit `%s`", orUnknown(run.Command), orUnknown(run.Commit))
	var tools []string
	if m.GoVersion != "" {
		tools = append(tools, "Go "+m.GoVersion)
	}
	if m.KubeProxy != "" {
		tools = append(tools, "kube-proxy "+m.KubeProxy)
	}
	if len(tools) > 0 {
		cmd += " (" + strings.Join(tools, ", ") + ")"
	}
	fmt.Fprintf(b, "- **Command:** %s\n", cmd)
	st := run.Settings
	var set []string
	if st.Endpoints > 0 {
		set = append(set, fmt.Sprintf("%d endpoints per service", st.Endpoints))
	}
	if st.Repeats > 0 {
		set = append(set, fmt.Sprintf("each data-plane workload run %d × %s s (the median is shown, the spread is the run's noise)",
			st.Repeats, strconv.FormatFloat(st.RunSeconds, 'f', -1, 64)))
	}
	if st.NewServiceRepeats > 0 {
		set = append(set, fmt.Sprintf("%d new services timed per cell", st.NewServiceRepeats))
	}
	if len(set) > 0 {
		fmt.Fprintf(b, "- **Settings:** %s\n", strings.Join(set, "; "))
	}
	b.WriteString("\n")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// fmtDuration writes a wall time as "25 min 43 s".
func fmtDuration(sec float64) string {
	d := time.Duration(sec * float64(time.Second)).Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	m := int(d / time.Minute)
	s := int((d % time.Minute) / time.Second)
	if m >= 60 {
		return fmt.Sprintf("%d h %d min %d s", m/60, m%60, s)
	}
	return fmt.Sprintf("%d min %d s", m, s)
}

func writeSection(b *strings.Builder, run modes.Run, s modes.Section, fn *footnotes) {
	title := s.Title
	if title == "" {
		title = s.Name
		switch s.Name {
		case modes.SectionHost:
			title = "Host kernel: every mode, ratios to DNAT"
		case modes.SectionGuest:
			title = "Guest kernel (user-mode Linux): IPVS modes"
		}
	}
	fmt.Fprintf(b, "## %s\n\n", title)
	if s.Name == modes.SectionGuest {
		b.WriteString("> **Guest kernel: ratios within the guest only.** These cells ran in the user-mode-linux guest,\n" +
			"> where syscalls are far slower than on a real node: compare a mode with the guest's DNAT rule,\n" +
			"> never an absolute figure here with the host section's.\n\n")
	}
	modeList := SectionModes(run, s)
	sizes := SectionSizes(s)
	writeControlTable(b, s, modeList, sizes, fn)
	writeDataTable(b, s, modeList, sizes, fn)
	writeNotes(b, s, modeList, sizes)
}

func writeControlTable(b *strings.Builder, s modes.Section, modeList []string, sizes []int, fn *footnotes) {
	t := benchtable.Table{
		Header: []string{"Mode", "Services", "First full sync (s)", "One change (s)", "New service answers (s, median)", "Proxy CPU (s)", "Proxy RSS (MiB)"},
		Pad:    true,
	}
	for _, m := range modeList {
		if m == s.Reference || m == modes.ModeDNAT {
			continue
		}
		for _, n := range sizes {
			c, ok := s.Cell(m, n)
			if !ok {
				continue
			}
			row := []string{m, benchtable.Thousands(int64(n))}
			switch {
			case c.Skipped != "":
				row = append(row, dashes("—"+fn.ref("Skipped: "+c.Skipped), len(controlFigures()))...)
			case c.Control == nil:
				row = append(row, dashes("—"+fn.ref("The control plane was not measured."), len(controlFigures()))...)
			default:
				for _, f := range controlFigures() {
					if why, missing := c.Control.Missing[f]; missing {
						row = append(row, "—"+fn.ref("Not measured: "+why))
						continue
					}
					row = append(row, fmtControl(f, ControlValue(*c.Control, f)))
				}
			}
			t.Rows = append(t.Rows, row)
		}
	}
	if len(t.Rows) == 0 {
		return
	}
	b.WriteString("### Control plane\n\n")
	b.WriteString(t.Markdown() + "\n")
	fn.flush(b)
}

// dashes is a row's cells of an unmeasured cell: the first carries the
// footnote, the others a bare dash.
func dashes(first string, n int) []string {
	out := []string{first}
	for range n - 1 {
		out = append(out, "—")
	}
	return out
}

// ControlValue is one control-plane figure, RSS in bytes.
func ControlValue(c modes.Control, figure string) float64 {
	switch figure {
	case modes.FigureFirstSync:
		return c.FirstSync
	case modes.FigureChange:
		return c.Change
	case modes.FigureNewService:
		return c.NewService
	case modes.FigureCPU:
		return c.CPU
	case modes.FigureRSS:
		return float64(c.RSS)
	}
	return 0
}

// controlAll is a figure's every measurement, where the run kept them.
func controlAll(c modes.Control, figure string) []float64 {
	switch figure {
	case modes.FigureChange:
		return c.ChangeAll
	case modes.FigureNewService:
		return c.NewServiceAll
	}
	return nil
}

func fmtControl(figure string, v float64) string {
	if figure == modes.FigureRSS {
		return strconv.FormatFloat(v/mib, 'f', 1, 64)
	}
	return fmtNum(v)
}

// SectionWorkloads lists the section's workloads: the known ones in table
// order, then any other in name order.
func SectionWorkloads(s modes.Section) []string {
	var extra []string
	for _, c := range s.Cells {
		for w := range c.Data {
			if !slices.Contains(modes.Workloads(), w) && !slices.Contains(extra, w) {
				extra = append(extra, w)
			}
		}
	}
	slices.Sort(extra)
	var out []string
	for _, w := range append(modes.Workloads(), extra...) {
		for _, c := range s.Cells {
			if _, ok := c.Data[w]; ok {
				out = append(out, w)
				break
			}
		}
	}
	return out
}

func writeDataTable(b *strings.Builder, s modes.Section, modeList []string, sizes []int, fn *footnotes) {
	t := benchtable.Table{Header: []string{"Workload", "Services"}, Right: []bool{false, true}, Pad: true}
	for _, m := range modeList {
		t.Header = append(t.Header, m)
		t.Right = append(t.Right, true)
	}
	// cellText is one mode's text in a row; only the rate row of a
	// skipped cell carries the footnote.
	cellText := func(m string, n int, f func(modes.Workload) string, w string, rateRow bool) string {
		c, ok := s.Cell(m, n)
		if !ok {
			return ""
		}
		if c.Skipped != "" {
			if !rateRow {
				return "—"
			}
			return "—" + fn.ref("Skipped: "+c.Skipped)
		}
		wl, ok := c.Data[w]
		if !ok {
			return "—"
		}
		return f(wl)
	}
	for _, w := range SectionWorkloads(s) {
		for _, n := range sizes {
			rate := []string{workloadName(w), benchtable.Thousands(int64(n))}
			lat := []string{"↳ p50 / p99 (ms)", ""}
			cpu := []string{"↳ machine CPU (µs/req)", ""}
			for _, m := range modeList {
				rate = append(rate, cellText(m, n, func(wl modes.Workload) string {
					if m == s.Reference {
						return fmtRate(wl.Rate)
					}
					r, ok := s.Ratio(m, n, w)
					if !ok {
						return fmtRate(wl.Rate)
					}
					return fmt.Sprintf("%s (%s×)", fmtRate(wl.Rate), strconv.FormatFloat(r, 'f', 2, 64))
				}, w, true))
				lat = append(lat, cellText(m, n, func(wl modes.Workload) string {
					if wl.P50 == 0 && wl.P99 == 0 {
						return "—"
					}
					return fmtNum(wl.P50) + " / " + fmtNum(wl.P99)
				}, w, false))
				cpu = append(cpu, cellText(m, n, func(wl modes.Workload) string {
					if wl.CPUPerOp == 0 {
						return "—"
					}
					return fmtNum(wl.CPUPerOp)
				}, w, false))
			}
			t.Rows = append(t.Rows, rate)
			if tcpWorkload(w) {
				t.Rows = append(t.Rows, lat)
			}
			t.Rows = append(t.Rows, cpu)
		}
	}
	if len(t.Rows) == 0 {
		return
	}
	ref := s.Reference
	if ref == "" {
		ref = "the reference"
	}
	fmt.Fprintf(b, "### Data plane\n\nRates, each with its ratio to %s (the reference) at the same service count.\n\n", ref)
	b.WriteString(t.Markdown() + "\n")
	fn.flush(b)
}

func writeNotes(b *strings.Builder, s modes.Section, modeList []string, sizes []int) {
	notes := slices.Clone(s.Notes)
	var lost []string
	for _, m := range modeList {
		for _, n := range sizes {
			c, ok := s.Cell(m, n)
			if !ok || c.Skipped != "" {
				continue
			}
			for _, w := range SectionWorkloads(s) {
				if wl, ok := c.Data[w]; ok && wl.Lost > 0 {
					lost = append(lost, fmt.Sprintf("%s at %s, %s: %s", m, benchtable.Services(n), ShortWorkload(w), benchtable.Thousands(wl.Lost)))
				}
			}
		}
	}
	if len(lost) > 0 {
		notes = append(notes, "Requests without an answer (UDP) or with an error (TCP), summed over the runs: "+strings.Join(lost, "; ")+".")
	}
	if len(notes) == 0 {
		return
	}
	b.WriteString("### Notes\n\n")
	for _, n := range notes {
		fmt.Fprintf(b, "- %s\n", n)
	}
	b.WriteString("\n")
}

// footnotes numbers the reasons for a dash, one label per distinct reason
// across the page, each defined under the first table that uses it.
type footnotes struct {
	labels  map[string]string
	pending []string
}

func (f *footnotes) ref(reason string) string {
	if l, ok := f.labels[reason]; ok {
		return "[^" + l + "]"
	}
	l := strconv.Itoa(len(f.labels) + 1)
	f.labels[reason] = l
	f.pending = append(f.pending, reason)
	return "[^" + l + "]"
}

func (f *footnotes) flush(b *strings.Builder) {
	for _, r := range f.pending {
		fmt.Fprintf(b, "[^%s]: %s\n", f.labels[r], r)
	}
	if len(f.pending) > 0 {
		b.WriteString("\n")
	}
	f.pending = nil
}
