// Package plots draws the figures of the side-by-side benchmark
// (bench/modes) from its results file: PNG and SVG next to the Markdown
// page that links them. It lives in bench/analysis so that gonum/plot, which
// only these pictures need, stays out of kproxy's own go.mod.
package plots

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/bench/benchtable"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"kproxy.dev/kproxy/bench/modes"
	"kproxy.dev/kproxy/bench/modes/report"
)

// plotDPI is the PNG resolution: the figures are sized in inches.
const plotDPI = 96

// Draw draws the run's figures into dir, each as PNG and SVG, and returns
// the paths written (dir joined with the file name), in order:
// latency (one-change and new-service latency against service count, host
// section), newconn (new connections/s against service count, host
// section), ratios (data-plane rates as ratios to DNAT at the smallest
// size, host section) and, when the run has a guest section, ratios-guest.
// A cell that was skipped or lacks a figure has no point in any plot.
func Draw(run modes.Run, dir string) ([]string, error) {
	host, _ := report.FindSection(run, modes.SectionHost)
	figs := []figure{latencyFigure(run, host), newConnFigure(run, host), ratiosFigure(run, host, report.PlotRatios)}
	if guest, ok := report.FindSection(run, modes.SectionGuest); ok {
		figs = append(figs, ratiosFigure(run, guest, report.PlotRatiosGuest))
	}
	var written []string
	for _, f := range figs {
		paths, err := f.write(dir)
		written = append(written, paths...)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// figure is one picture: its size and how to draw it on a canvas.
type figure struct {
	name string
	w, h vg.Length
	draw func(dc draw.Canvas)
}

// write renders the figure as PNG and SVG into dir.
func (f figure) write(dir string) ([]string, error) {
	png := vgimg.NewWith(vgimg.UseWH(f.w, f.h), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	svg := vgsvg.New(f.w, f.h)
	outputs := []struct {
		ext    string
		canvas vg.CanvasSizer
		out    io.WriterTo
	}{
		{"png", png, vgimg.PngCanvas{Canvas: png}},
		{"svg", svg, svg},
	}
	var written []string
	for _, o := range outputs {
		if err := f.drawSafely(o.canvas); err != nil {
			return written, err
		}
		var buf bytes.Buffer
		if _, err := o.out.WriteTo(&buf); err != nil {
			return written, fmt.Errorf("rendering the %s plot as %s: %w", f.name, o.ext, err)
		}
		path := filepath.Join(dir, f.name+"."+o.ext)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return written, fmt.Errorf("writing the %s plot: %w", f.name, err)
		}
		written = append(written, path)
	}
	return written, nil
}

// drawSafely draws the figure, turning a panic of the plotting library
// (it panics on some degenerate axes) into an error: a run's results must
// never be lost to a picture.
func (f figure) drawSafely(c vg.CanvasSizer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("drawing the %s plot: %v", f.name, r)
		}
	}()
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	f.draw(dc)
	return nil
}

// modeStyle gives a mode its colour (one per data path, so kproxy's and
// kube-proxy's implementation of a mode share it), dash and glyph (kproxy
// solid with circles, kube-proxy dashed with triangles). Okabe-Ito colours,
// which colour-blind readers tell apart.
func modeStyle(mode string) (color.Color, []vg.Length, draw.GlyphDrawer) {
	c := color.RGBA{R: 120, G: 120, B: 120, A: 255}
	switch mode {
	case modes.ModeDNAT:
		return color.Black, nil, draw.BoxGlyph{}
	case modes.ModeUserspaceRedirect:
		c = color.RGBA{R: 230, G: 159, A: 255}
	case modes.ModeUserspaceLocal:
		c = color.RGBA{R: 204, G: 121, B: 167, A: 255}
	case modes.ModeUserspaceSKLookup:
		c = color.RGBA{R: 240, G: 228, B: 66, A: 255}
	case modes.ModeKproxyIPTablesNFT, modes.ModeKubeProxyIPTables:
		c = color.RGBA{G: 114, B: 178, A: 255}
	case modes.ModeKproxyIPTablesLegacy:
		c = color.RGBA{R: 86, G: 180, B: 233, A: 255}
	case modes.ModeKproxyNFTables, modes.ModeKubeProxyNFTables:
		c = color.RGBA{G: 158, B: 115, A: 255}
	case modes.ModeKproxyIPVS, modes.ModeKubeProxyIPVS:
		c = color.RGBA{R: 213, G: 94, A: 255}
	}
	if strings.HasPrefix(mode, "kube-proxy") {
		return c, []vg.Length{vg.Points(6), vg.Points(3)}, draw.TriangleGlyph{}
	}
	return c, nil, draw.CircleGlyph{}
}

// workloadColor colours a workload's bars.
func workloadColor(i int) color.Color {
	palette := []color.Color{
		color.RGBA{G: 114, B: 178, A: 255},
		color.RGBA{R: 230, G: 159, A: 255},
		color.RGBA{G: 158, B: 115, A: 255},
		color.RGBA{R: 204, G: 121, B: 167, A: 255},
		color.RGBA{R: 86, G: 180, B: 233, A: 255},
		color.RGBA{R: 213, G: 94, A: 255},
	}
	return palette[i%len(palette)]
}

// series is one mode's line: its points, ascending in x.
type series struct {
	mode string
	xys  plotter.XYs
}

// modeSeries collects, per mode of the section, the points value gives
// (false: no point, the cell was skipped or the figure is missing).
func modeSeries(run modes.Run, s modes.Section, withReference bool, value func(c modes.Cell) (float64, bool)) []series {
	var out []series
	for _, m := range report.SectionModes(run, s) {
		if m == s.Reference && !withReference {
			continue
		}
		se := series{mode: m}
		for _, n := range report.SectionSizes(s) {
			c, ok := s.Cell(m, n)
			if !ok || c.Skipped != "" {
				continue
			}
			if v, ok := value(c); ok && v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
				se.xys = append(se.xys, plotter.XY{X: float64(n), Y: v})
			}
		}
		out = append(out, se)
	}
	return out
}

// controlPoint is a control-plane figure of a cell, when it was taken.
func controlPoint(figure string) func(c modes.Cell) (float64, bool) {
	return func(c modes.Cell) (float64, bool) {
		if c.Control == nil {
			return 0, false
		}
		if _, missing := c.Control.Missing[figure]; missing {
			return 0, false
		}
		return report.ControlValue(*c.Control, figure), true
	}
}

func latencyFigure(run modes.Run, host modes.Section) figure {
	change := modeSeries(run, host, false, controlPoint(modes.FigureChange))
	newSvc := modeSeries(run, host, false, controlPoint(modes.FigureNewService))
	return figure{
		name: report.PlotLatency, w: 11.5 * vg.Inch, h: 5 * vg.Inch,
		draw: func(dc draw.Canvas) {
			legendW := 2.4 * vg.Inch
			plots := draw.Crop(dc, 0.1*vg.Inch, -legendW, 0.05*vg.Inch, -0.1*vg.Inch)
			tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 0.3 * vg.Inch, PadTop: 0.1 * vg.Inch, PadBottom: 0.1 * vg.Inch, PadLeft: 0.1 * vg.Inch}
			left := linePlot(run, host, change, "One endpoint change until it is in the kernel", "seconds (log scale)", true)
			right := linePlot(run, host, newSvc, "New service until it answers (median)", "seconds (log scale)", true)
			left.Draw(tiles.At(plots, 0, 0))
			right.Draw(tiles.At(plots, 1, 0))
			drawLegend(draw.Crop(dc, dc.Max.X-dc.Min.X-legendW+0.2*vg.Inch, 0, 0, -0.35*vg.Inch), modeLegend(change))
		},
	}
}

func newConnFigure(run modes.Run, host modes.Section) figure {
	rates := modeSeries(run, host, true, func(c modes.Cell) (float64, bool) {
		w, ok := c.Data[modes.WorkloadNewConn]
		return w.Rate, ok
	})
	return figure{
		name: report.PlotNewConn, w: 9 * vg.Inch, h: 5 * vg.Inch,
		draw: func(dc draw.Canvas) {
			legendW := 2.4 * vg.Inch
			p := linePlot(run, host, rates, "New connections per second (one HTTP request each), host kernel", "connections/s", false)
			p.Draw(draw.Crop(dc, 0.1*vg.Inch, -legendW, 0.05*vg.Inch, -0.1*vg.Inch))
			drawLegend(draw.Crop(dc, dc.Max.X-dc.Min.X-legendW+0.2*vg.Inch, 0, 0, -0.35*vg.Inch), modeLegend(rates))
		},
	}
}

// linePlot is one panel of lines against the section's service counts
// (log x); logY puts y on a log scale too, otherwise it starts at zero.
func linePlot(run modes.Run, s modes.Section, all []series, title, yLabel string, logY bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.Text = "services (log scale)"
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())

	sizes := report.SectionSizes(s)
	if len(sizes) == 0 {
		sizes = slices.Clone(run.Settings.Sizes)
	}
	var sizeTicks plot.ConstantTicks
	for _, n := range sizes {
		if n > 0 {
			sizeTicks = append(sizeTicks, plot.Tick{Value: float64(n), Label: benchtable.Thousands(int64(n))})
		}
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks
	p.X.Min, p.X.Max = logRange(ticksValues(sizeTicks), 1.6)

	var ys []float64
	for _, se := range all {
		for _, xy := range se.xys {
			ys = append(ys, xy.Y)
		}
	}
	if len(ys) == 0 {
		p.Title.Text += " (no data)"
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Min, p.Y.Max = logRange(ys, 1.5)
	} else {
		p.Y.Tick.Marker = thousandsTicks{}
		p.Y.Min, p.Y.Max = 0, 1
		if len(ys) > 0 {
			p.Y.Max = slices.Max(ys) * 1.1
		}
	}
	for _, se := range all {
		if len(se.xys) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(se.xys)
		if err != nil {
			continue // NewLinePoints refuses only NaN and infinities, filtered out already
		}
		c, dashes, glyph := modeStyle(se.mode)
		l.Color, l.Dashes, l.Width = c, dashes, vg.Points(1.5)
		sc.Color, sc.Shape, sc.Radius = c, glyph, vg.Points(3)
		p.Add(l, sc)
	}
	return p
}

func ticksValues(ts plot.ConstantTicks) []float64 {
	var out []float64
	for _, t := range ts {
		out = append(out, t.Value)
	}
	return out
}

// logRange is a positive axis range around vs with a margin factor, also
// for one value or none (the library would stretch a one-value range to
// include zero, which a log scale cannot show).
func logRange(vs []float64, margin float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if v > 0 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 0) {
		return 0.1, 10
	}
	return lo / margin, hi * margin
}

// logTicks marks every power of ten, labelled, and its multiples, labelled
// when the axis spans less than two decades; only within the range.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	few := math.Log10(hi/lo) < 2
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		base := math.Pow(10, e)
		for i := 1; i < 10; i++ {
			v := base * float64(i)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 || (few && (i == 2 || i == 5)) {
				t.Label = tickLabel(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// thousandsTicks is the library's linear ticks with "10,000" labels.
type thousandsTicks struct{}

func (thousandsTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = tickLabel(ticks[i].Value)
		}
	}
	return ticks
}

// ratioTicks labels every tenth of a ratio (every fifth past 2×), so a
// bar's distance from 1 reads off the axis.
type ratioTicks struct{}

func (ratioTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 0.1
	if hi > 2 {
		step = 0.5
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		v := i * step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 1, 64)})
	}
	return ticks
}

// orUnknown names a missing reference as the Markdown page does.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func tickLabel(v float64) string {
	if v >= 1000 && v == math.Trunc(v) {
		return benchtable.Thousands(int64(v))
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// legendEntry is one line of a legend drawn beside the plots.
type legendEntry struct {
	name  string
	thumb []plot.Thumbnailer
}

func modeLegend(all []series) []legendEntry {
	var out []legendEntry
	for _, se := range all {
		c, dashes, glyph := modeStyle(se.mode)
		l := &plotter.Line{XYs: nil, LineStyle: draw.LineStyle{Color: c, Width: vg.Points(1.5), Dashes: dashes}}
		sc := &plotter.Scatter{GlyphStyle: draw.GlyphStyle{Color: c, Shape: glyph, Radius: vg.Points(3)}}
		name := se.mode
		if len(se.xys) == 0 {
			name += " (no data)"
		}
		out = append(out, legendEntry{name: name, thumb: []plot.Thumbnailer{l, sc}})
	}
	return out
}

func drawLegend(c draw.Canvas, entries []legendEntry) {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.ThumbnailWidth = 0.45 * vg.Inch
	l.TextStyle.Font.Size = vg.Points(11)
	l.Padding = vg.Points(5)
	for _, e := range entries {
		l.Add(e.name, e.thumb...)
	}
	l.Draw(c)
}

// ratiosFigure draws each mode's data-plane rate over the reference's at
// the section's smallest size (one service in a default run), one bar per
// workload, modes top to bottom in table order.
func ratiosFigure(run modes.Run, s modes.Section, name string) figure {
	var modeList []string
	for _, m := range report.SectionModes(run, s) {
		if m != s.Reference {
			modeList = append(modeList, m)
		}
	}
	sizes := report.SectionSizes(s)
	size := 1
	if len(sizes) > 0 {
		size = sizes[0]
	}
	workloads := report.SectionWorkloads(s)
	where := "host kernel"
	if s.Name == modes.SectionGuest {
		where = "guest kernel, ratios within the guest only"
	}
	h := max(4*vg.Inch, vg.Length(len(modeList))*0.6*vg.Inch+1.6*vg.Inch)
	return figure{
		name: name, w: 10 * vg.Inch, h: h,
		draw: func(dc draw.Canvas) {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("Data-plane rate as a ratio to %s at %s (%s)", orUnknown(s.Reference), benchtable.Services(size), where)
			p.Title.TextStyle.Font.Size = vg.Points(12)
			p.X.Label.Text = fmt.Sprintf("rate ÷ %s rate (1 = as fast as %s)", orUnknown(s.Reference), orUnknown(s.Reference))
			p.Add(plotter.NewGrid())
			// Top to bottom in table order: the nominal axis counts up.
			names := slices.Clone(modeList)
			slices.Reverse(names)
			if len(names) == 0 {
				p.Title.Text += " (no data)"
			}
			barW := 0.11 * vg.Inch
			hi := 1.0
			l := plot.NewLegend()
			for i, w := range workloads {
				vals := make(plotter.Values, len(names))
				for j, m := range names {
					if r, ok := s.Ratio(m, size, w); ok && !math.IsNaN(r) && !math.IsInf(r, 0) && r > 0 {
						vals[j] = r
						hi = max(hi, r)
					}
				}
				bars, err := plotter.NewBarChart(vals, barW)
				if err != nil {
					continue
				}
				bars.Horizontal = true
				bars.Color = workloadColor(i)
				bars.LineStyle.Width = 0
				// First workload on top within a group.
				bars.Offset = vg.Length(float64(len(workloads)-1)/2-float64(i)) * barW
				p.Add(bars)
				l.Add(report.ShortWorkload(w), bars)
			}
			if len(names) > 0 {
				one, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.5}, {X: 1, Y: float64(len(names)) - 0.5}})
				if err == nil {
					one.Color, one.Dashes, one.Width = color.Black, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1)
					p.Add(one)
				}
				p.NominalY(names...)
			}
			p.X.Min, p.X.Max = 0, hi*1.08
			p.X.Tick.Marker = ratioTicks{}
			legendW := 1.9 * vg.Inch
			p.Draw(draw.Crop(dc, 0.1*vg.Inch, -legendW, 0.05*vg.Inch, -0.1*vg.Inch))
			l.Top, l.Left = true, true
			l.ThumbnailWidth = 0.3 * vg.Inch
			l.TextStyle.Font.Size = vg.Points(11)
			l.Padding = vg.Points(5)
			l.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-legendW+0.15*vg.Inch, 0, 0, -0.4*vg.Inch))
		},
	}
}
