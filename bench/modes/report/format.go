// Package report turns a results file of the side-by-side benchmark
// (modes.Run) into what people read: the Markdown table (Markdown) and the
// rows that moved between two runs (Compare). The plots are drawn apart, by
// bench/analysis (its own module, so the plotting library stays out of
// kproxy's go.mod), from the same results file; the orders and labels it
// shares with the table are exported here so the two agree.
package report

import (
	"math"
	"slices"
	"strconv"

	"kproxy.dev/kproxy/bench/benchtable"

	"kproxy.dev/kproxy/bench/modes"
)

// controlFigures lists the control-plane figures in table order.
func controlFigures() []string {
	return []string{modes.FigureFirstSync, modes.FigureChange, modes.FigureNewService, modes.FigureCPU, modes.FigureRSS}
}

// workloadName is a workload as the table names it, with its unit.
func workloadName(w string) string {
	switch w {
	case modes.WorkloadKeepAlive:
		return "keep-alive HTTP (req/s)"
	case modes.WorkloadNewConn:
		return "new connection HTTP (req/s)"
	case modes.WorkloadUDPRR:
		return "UDP request/response (req/s)"
	case modes.WorkloadUDPFlows:
		return "new UDP flows (flows/s)"
	}
	return w
}

// ShortWorkload is a workload's name in plot legends and compare rows.
func ShortWorkload(w string) string {
	switch w {
	case modes.WorkloadKeepAlive:
		return "keep-alive"
	case modes.WorkloadNewConn:
		return "new conn"
	case modes.WorkloadUDPRR:
		return "UDP req/resp"
	case modes.WorkloadUDPFlows:
		return "new UDP flows"
	}
	return w
}

// tcpWorkload says whether wrk measured the workload's latency.
func tcpWorkload(w string) bool {
	return w == modes.WorkloadKeepAlive || w == modes.WorkloadNewConn
}

// Plot names (files <name>.png and <name>.svg next to the Markdown page,
// which links them; bench/analysis/plots draws them).
const (
	PlotLatency     = "latency"
	PlotNewConn     = "newconn"
	PlotRatios      = "ratios"
	PlotRatiosGuest = "ratios-guest"
)

// FindSection returns the run's section of that name, or an empty one
// measured against DNAT when the run has none.
func FindSection(run modes.Run, name string) (modes.Section, bool) {
	for _, s := range run.Sections {
		if s.Name == name {
			return s, true
		}
	}
	return modes.Section{Name: name, Reference: modes.ModeDNAT}, false
}

// SectionModes returns the section's modes in table order: the reference
// first, then the run's host mode order (Settings.Modes), then any other
// mode in the order its first cell appears.
func SectionModes(run modes.Run, s modes.Section) []string {
	var out []string
	add := func(m string) {
		if m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	present := map[string]bool{}
	for _, c := range s.Cells {
		present[c.Mode] = true
	}
	if present[s.Reference] {
		add(s.Reference)
	}
	for _, m := range run.Settings.Modes {
		if present[m] {
			add(m)
		}
	}
	for _, c := range s.Cells {
		add(c.Mode)
	}
	return out
}

// SectionSizes returns the service counts of the section's cells,
// ascending.
func SectionSizes(s modes.Section) []int {
	var out []int
	for _, c := range s.Cells {
		if !slices.Contains(out, c.Services) {
			out = append(out, c.Services)
		}
	}
	slices.Sort(out)
	return out
}

// orderedSections returns the run's sections, host first, then guest, then
// any other in file order.
func orderedSections(run modes.Run) []modes.Section {
	rank := func(s modes.Section) int {
		switch s.Name {
		case modes.SectionHost:
			return 0
		case modes.SectionGuest:
			return 1
		}
		return 2
	}
	out := slices.Clone(run.Sections)
	slices.SortStableFunc(out, func(a, b modes.Section) int { return rank(a) - rank(b) })
	return out
}

// fmtRate rounds a rate to three significant digits (run-to-run noise is
// a few per cent, more digits would be noise) with thousands separators.
func fmtRate(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	if math.Abs(v) < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	mag := math.Pow(10, math.Floor(math.Log10(math.Abs(v)))-2)
	return benchtable.Thousands(int64(math.Round(v/mag) * mag))
}

// fmtNum formats a positive figure (seconds, ms, µs, MiB) with about three
// significant digits and no exponent.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case a >= 1000:
		return benchtable.Thousands(int64(math.Round(v)))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a >= 0.01 || a == 0:
		return strconv.FormatFloat(v, 'f', 3, 64)
	default:
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
}

// fmtPct formats a relative change or spread as a percentage.
func fmtPct(v float64, sign bool) string {
	s := strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
	if sign && v > 0 {
		return "+" + s
	}
	return s
}

const mib = 1 << 20
