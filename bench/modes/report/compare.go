package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"kproxy.dev/kproxy/bench/benchtable"

	"kproxy.dev/kproxy/bench/modes"
)

// Thresholds Compare weighs a relative change against.
const (
	// NoiseFloor is the least relative change Compare reports, whatever
	// the measured noise: three runs that happen to agree closely would
	// otherwise make a 1% move look real.
	NoiseFloor = 0.05
	// OnceFloor is the threshold of figures measured once per run (first
	// sync, proxy CPU and RSS, and any figure whose every measurement was
	// not kept): one value has no spread to weigh a change against. A
	// single process start on a shared 2-core machine moves by 10-20%
	// with page cache, scheduling and the neighbours' load, so below 25%
	// a move is as likely the machine as the code.
	OnceFloor = 0.25
)

// Change is one figure present in both runs whose relative change exceeds
// its noise.
type Change struct {
	Section  string
	Mode     string
	Services int
	// Figure is a workload ID (modes.Workload*: its rate) or a
	// control-plane figure (Figure*).
	Figure string
	// Old and New are the figure in each run (rates in requests or flows
	// per second, times in seconds, RSS in bytes).
	Old, New float64
	// Delta is the relative change, (New-Old)/Old.
	Delta float64
	// Noise is the threshold Delta exceeded: the larger of the runs'
	// relative spreads, at least NoiseFloor (OnceFloor for figures
	// measured once).
	Noise float64
	// Worse says the change is for the worse: a lower rate, or a longer
	// time, more CPU or more memory.
	Worse bool
}

// Label names the figure for people: "host kproxy-nftables at 10,000
// services: new conn (req/s)".
func (c Change) Label() string {
	return fmt.Sprintf("%s %s at %s: %s", c.Section, c.Mode, benchtable.Services(c.Services), figureLabel(c.Figure))
}

func figureLabel(f string) string {
	switch f {
	case modes.FigureFirstSync:
		return "first full sync (s)"
	case modes.FigureChange:
		return "one change (s)"
	case modes.FigureNewService:
		return "new service answers (s)"
	case modes.FigureCPU:
		return "proxy CPU (s)"
	case modes.FigureRSS:
		return "proxy RSS (MiB)"
	case modes.WorkloadKeepAlive, modes.WorkloadNewConn, modes.WorkloadUDPRR:
		return ShortWorkload(f) + " (req/s)"
	case modes.WorkloadUDPFlows:
		return ShortWorkload(f) + " (flows/s)"
	}
	return f + " (rate)"
}

// OneSided is a section, cell or figure that only one of two runs has
// (the other lacks it, skipped it or could not take it).
type OneSided struct {
	Section  string
	Mode     string // empty: the whole section
	Services int
	Figure   string // empty: the whole cell
	// In is the run that has it: "old" or "new".
	In string
	// Why says what the other run has instead.
	Why string
}

func (o OneSided) String() string {
	var b strings.Builder
	b.WriteString(o.Section)
	if o.Mode != "" {
		fmt.Fprintf(&b, " %s at %s", o.Mode, benchtable.Services(o.Services))
	}
	if o.Figure != "" {
		b.WriteString(": " + strings.TrimSuffix(figureLabel(o.Figure), " (rate)"))
	}
	fmt.Fprintf(&b, ": only in the %s run (%s)", o.In, o.Why)
	return b.String()
}

// CheckComparable refuses two runs Compare would misread: results of a
// schema version other than this program's (modes.ReadRun refuses them
// too; this covers runs that did not come from a file).
func CheckComparable(old, new modes.Run) error {
	for _, r := range []struct {
		which string
		run   modes.Run
	}{{"old", old}, {"new", new}} {
		if r.run.Version != modes.SchemaVersion {
			return fmt.Errorf("the %s run has schema version %d; this program compares version %d", r.which, r.run.Version, modes.SchemaVersion)
		}
	}
	return nil
}

// pair is a cell as both runs have it.
type pair struct {
	section  string
	mode     string
	services int
	old, new modes.Cell
	inOld    bool
	inNew    bool
}

// pairs lists both runs' cells in table order (sections host first, the
// new run's mode order, then modes only the old run has, sizes ascending),
// and the sections only one run has.
func pairs(old, new modes.Run) ([]pair, []OneSided) {
	var out []pair
	var one []OneSided
	var names []string
	for _, r := range []modes.Run{new, old} {
		for _, s := range orderedSections(r) {
			if !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
	}
	for _, name := range names {
		oldSec, inOld := FindSection(old, name)
		ns, inNew := FindSection(new, name)
		switch {
		case !inOld:
			one = append(one, OneSided{Section: name, In: "new", Why: "the old run has no such section"})
			continue
		case !inNew:
			one = append(one, OneSided{Section: name, In: "old", Why: "the new run has no such section"})
			continue
		}
		modeList := SectionModes(new, ns)
		for _, m := range SectionModes(old, oldSec) {
			if !slices.Contains(modeList, m) {
				modeList = append(modeList, m)
			}
		}
		sizes := SectionSizes(ns)
		for _, n := range SectionSizes(oldSec) {
			if !slices.Contains(sizes, n) {
				sizes = append(sizes, n)
			}
		}
		slices.Sort(sizes)
		for _, m := range modeList {
			for _, n := range sizes {
				p := pair{section: name, mode: m, services: n}
				p.old, p.inOld = oldSec.Cell(m, n)
				p.new, p.inNew = ns.Cell(m, n)
				if p.inOld || p.inNew {
					out = append(out, p)
				}
			}
		}
	}
	return out, one
}

// OnlyInOne lists what one run has and the other lacks: sections, cells
// (absent, or skipped in one run only) and figures (a workload or a
// control-plane figure taken in one run only). Compare weighs none of
// them.
func OnlyInOne(old, new modes.Run) []OneSided {
	ps, out := pairs(old, new)
	for _, p := range ps {
		at := OneSided{Section: p.section, Mode: p.mode, Services: p.services}
		side := func(inOld bool, why string) OneSided {
			o := at
			o.In, o.Why = "new", "old: "+why
			if inOld {
				o.In, o.Why = "old", "new: "+why
			}
			return o
		}
		switch {
		case !p.inOld:
			out = append(out, side(false, "no such cell"))
			continue
		case !p.inNew:
			out = append(out, side(true, "no such cell"))
			continue
		case p.old.Skipped != "" && p.new.Skipped != "":
			continue
		case p.old.Skipped != "":
			out = append(out, side(false, "skipped: "+p.old.Skipped))
			continue
		case p.new.Skipped != "":
			out = append(out, side(true, "skipped: "+p.new.Skipped))
			continue
		}
		for _, w := range workloadUnion(p.old, p.new) {
			_, o := p.old.Data[w]
			_, n := p.new.Data[w]
			if o != n {
				f := side(o, "not measured")
				f.Figure = w
				out = append(out, f)
			}
		}
		oc, nc := p.old.Control, p.new.Control
		if (oc == nil) != (nc == nil) {
			f := side(oc != nil, "no control-plane figures")
			f.Figure = "control plane"
			out = append(out, f)
			continue
		}
		if oc == nil {
			continue
		}
		for _, fig := range controlFigures() {
			ow, oMissing := oc.Missing[fig]
			nw, nMissing := nc.Missing[fig]
			switch {
			case oMissing && !nMissing:
				f := side(false, "missing: "+ow)
				f.Figure = fig
				out = append(out, f)
			case nMissing && !oMissing:
				f := side(true, "missing: "+nw)
				f.Figure = fig
				out = append(out, f)
			}
		}
	}
	return out
}

func workloadUnion(a, b modes.Cell) []string {
	var extra []string
	for _, c := range []modes.Cell{a, b} {
		for w := range c.Data {
			if !slices.Contains(modes.Workloads(), w) && !slices.Contains(extra, w) {
				extra = append(extra, w)
			}
		}
	}
	slices.Sort(extra)
	return append(modes.Workloads(), extra...)
}

// Compare returns every figure both runs measured whose relative change
// exceeds the noise the runs measured themselves, in table order:
//   - a data-plane rate (each mode, size and workload, DNAT included):
//     the larger of the two runs' relative spread of Rates,
//     (max-min)/median;
//   - one change and new service: likewise, of ChangeAll and
//     NewServiceAll;
//   - first sync, proxy CPU and RSS, measured once: OnceFloor;
//
// never less than NoiseFloor. A figure either run lacks (skipped, missing,
// zero) is not compared: OnlyInOne lists those.
func Compare(old, new modes.Run) []Change {
	ps, _ := pairs(old, new)
	var out []Change
	for _, p := range ps {
		if !p.inOld || !p.inNew || p.old.Skipped != "" || p.new.Skipped != "" {
			continue
		}
		base := Change{Section: p.section, Mode: p.mode, Services: p.services}
		for _, w := range workloadUnion(p.old, p.new) {
			ow, ok1 := p.old.Data[w]
			nw, ok2 := p.new.Data[w]
			if !ok1 || !ok2 {
				continue
			}
			c := base
			c.Figure = w
			if weigh(&c, ow.Rate, nw.Rate, ow.Rates, nw.Rates, true) {
				out = append(out, c)
			}
		}
		oc, nc := p.old.Control, p.new.Control
		if oc == nil || nc == nil {
			continue
		}
		for _, fig := range controlFigures() {
			if _, m := oc.Missing[fig]; m {
				continue
			}
			if _, m := nc.Missing[fig]; m {
				continue
			}
			c := base
			c.Figure = fig
			if weigh(&c, ControlValue(*oc, fig), ControlValue(*nc, fig), controlAll(*oc, fig), controlAll(*nc, fig), false) {
				out = append(out, c)
			}
		}
	}
	return out
}

// weigh fills c's values and threshold and says whether the change
// exceeds it; higherBetter orients Worse.
func weigh(c *Change, old, new float64, oldAll, newAll []float64, higherBetter bool) bool {
	if !(old > 0) || !(new > 0) || math.IsInf(old, 0) || math.IsInf(new, 0) {
		return false
	}
	c.Old, c.New = old, new
	c.Delta = (new - old) / old
	so, okOld := spread(oldAll)
	sn, okNew := spread(newAll)
	switch {
	case okOld && okNew:
		c.Noise = max(so, sn, NoiseFloor)
	default:
		c.Noise = max(so, sn, OnceFloor)
	}
	c.Worse = (c.Delta < 0) == higherBetter
	return math.Abs(c.Delta) > c.Noise
}

// spread is (max-min)/median of a figure's measurements: false when there
// are fewer than two or the median is not positive.
func spread(vs []float64) (float64, bool) {
	if len(vs) < 2 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if !(med > 0) {
		return 0, false
	}
	return (s[len(s)-1] - s[0]) / med, true
}

// FormatComparison is bench-compare's report: the two runs, the figures
// that moved beyond their noise (or a line saying none did), and what
// only one run has.
func FormatComparison(old, new modes.Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "old: %s\nnew: %s\n\n", describeRun(old), describeRun(new))
	changes := Compare(old, new)
	if len(changes) == 0 {
		b.WriteString("No figure moved beyond its noise.\n")
	} else {
		fmt.Fprintf(&b, "%d figures moved beyond their noise:\n\n", len(changes))
		t := textTable{header: []string{"figure", "old", "new", "change", "noise", ""}}
		for _, c := range changes {
			verdict := "better"
			if c.Worse {
				verdict = "worse"
			}
			t.rows = append(t.rows, []string{c.Label(), fmtFigure(c.Figure, c.Old), fmtFigure(c.Figure, c.New),
				fmtPct(c.Delta, true), fmtPct(c.Noise, false), verdict})
		}
		t.write(&b)
	}
	if one := OnlyInOne(old, new); len(one) > 0 {
		b.WriteString("\nNot compared, in one run only:\n")
		for _, o := range one {
			b.WriteString("  " + o.String() + "\n")
		}
	}
	return b.String()
}

func describeRun(r modes.Run) string {
	started := "unknown date"
	if !r.Started.IsZero() {
		started = r.Started.UTC().Format("2006-01-02 15:04 MST")
	}
	return fmt.Sprintf("%s, commit %s, %s", started, orUnknown(r.Commit), orUnknown(r.Command))
}

// fmtFigure writes a compared figure with enough digits to see a move.
func fmtFigure(figure string, v float64) string {
	switch figure {
	case modes.FigureRSS:
		return fmtNum(v/mib) + " MiB"
	case modes.FigureFirstSync, modes.FigureChange, modes.FigureNewService, modes.FigureCPU:
		return fmtNum(v) + " s"
	}
	return benchtable.Thousands(int64(math.Round(v)))
}

// textTable is a plain-text table: first column left, the others right.
type textTable struct {
	header []string
	rows   [][]string
}

func (t textTable) write(b *strings.Builder) {
	width := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, r := range append([][]string{t.header}, t.rows...) {
		var line strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			switch {
			case i == 0:
				line.WriteString(c + pad)
			case i == len(r)-1:
				line.WriteString("  " + c)
			default:
				line.WriteString("  " + pad + c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}
