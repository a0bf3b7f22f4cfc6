package plots

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/modes"
	"kproxy.dev/kproxy/bench/modes/report"
)

// fixture reads a results file bench/modes keeps for its own tests: what
// the benchmark writes is what this package draws.
func fixture(t *testing.T, name string) modes.Run {
	t.Helper()
	run, err := modes.ReadRun(filepath.Join("..", "..", "modes", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func TestDraw(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*modes.Run)
		plots []string
	}{
		{name: "full run", plots: []string{report.PlotLatency, report.PlotNewConn, report.PlotRatios, report.PlotRatiosGuest}},
		{
			name:  "host only, one size",
			plots: []string{report.PlotLatency, report.PlotNewConn, report.PlotRatios},
			edit: func(r *modes.Run) {
				r.Sections = r.Sections[:1]
				r.Sections[0].Cells = slices.DeleteFunc(r.Sections[0].Cells, func(c modes.Cell) bool { return c.Services != 1 })
			},
		},
		{
			name:  "skipped and missing everywhere",
			plots: []string{report.PlotLatency, report.PlotNewConn, report.PlotRatios, report.PlotRatiosGuest},
			edit: func(r *modes.Run) {
				for si := range r.Sections {
					for ci := range r.Sections[si].Cells {
						c := &r.Sections[si].Cells[ci]
						switch {
						case c.Mode == modes.ModeDNAT && c.Services == 1:
							c.Skipped = "the reference failed"
						case c.Control != nil:
							c.Control.Missing = map[string]string{modes.FigureChange: "timed out", modes.FigureNewService: "timed out"}
							delete(c.Data, modes.WorkloadNewConn)
						}
					}
				}
			},
		},
		{name: "no sections", plots: []string{report.PlotLatency, report.PlotNewConn, report.PlotRatios}, edit: func(r *modes.Run) { r.Sections = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := fixture(t, "results.json")
			if tt.edit != nil {
				tt.edit(&run)
			}
			dir := t.TempDir()
			got, err := Draw(run, dir)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, p := range tt.plots {
				want = append(want, filepath.Join(dir, p+".png"), filepath.Join(dir, p+".svg"))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Draw wrote %q, want %q", got, want)
			}
			for _, path := range got {
				checkImage(t, path)
			}
		})
	}
}

// checkImage checks a PNG decodes to a picture of sane size and an SVG is
// well-formed XML with an svg root.
func checkImage(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch filepath.Ext(path) {
	case ".png":
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b := img.Bounds()
		if b.Dx() < 600 || b.Dx() > 2000 || b.Dy() < 300 || b.Dy() > 1500 {
			t.Errorf("%s is %d×%d pixels, want between 600×300 and 2000×1500", path, b.Dx(), b.Dy())
		}
	case ".svg":
		dec := xml.NewDecoder(bytes.NewReader(data))
		root := ""
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", path, err)
			}
			if se, ok := tok.(xml.StartElement); ok && root == "" {
				root = se.Name.Local
			}
		}
		if root != "svg" {
			t.Errorf("%s: root element %q, want svg", path, root)
		}
		label := "services (log scale)"
		if strings.HasPrefix(filepath.Base(path), report.PlotRatios) {
			label = "rate ÷ dnat rate"
		}
		if !strings.Contains(string(data), label) {
			t.Errorf("%s lacks its axis label %q", path, label)
		}
	default:
		t.Errorf("unexpected file %s", path)
	}
}

// TestDrawDeterministic: the same results draw the same bytes, so
// re-rendering a results file changes nothing in the repository.
func TestDrawDeterministic(t *testing.T) {
	run := fixture(t, "results.json")
	a, b := t.TempDir(), t.TempDir()
	pa, err := Draw(run, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Draw(run, b); err != nil {
		t.Fatal(err)
	}
	for _, p := range pa {
		da, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		db, err := os.ReadFile(filepath.Join(b, filepath.Base(p)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(da, db) {
			t.Errorf("%s differs between two renderings", filepath.Base(p))
		}
	}
}

func TestDrawUnwritableDir(t *testing.T) {
	if _, err := Draw(fixture(t, "results.json"), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Draw into a missing directory: want an error")
	}
}

// TestLogAxes: log axes must stay positive and non-empty, even for one
// value or none (the library panics on a non-positive log range).
func TestLogAxes(t *testing.T) {
	tests := []struct {
		name           string
		vs             []float64
		wantLo, wantHi float64
		wantLabels     []string
	}{
		{name: "none", vs: nil, wantLo: 0.1, wantHi: 10, wantLabels: []string{"0.1", "1", "10"}},
		{name: "zeros only", vs: []float64{0, -1}, wantLo: 0.1, wantHi: 10, wantLabels: []string{"0.1", "1", "10"}},
		{name: "one value", vs: []float64{1}, wantLo: 1 / 1.5, wantHi: 1.5, wantLabels: []string{"1"}},
		{name: "a decade", vs: []float64{0.02, 0.3}, wantLo: 0.02 / 1.5, wantHi: 0.45, wantLabels: []string{"0.02", "0.05", "0.1", "0.2"}},
		{name: "four decades", vs: []float64{1, 10000}, wantLo: 1 / 1.5, wantHi: 15000, wantLabels: []string{"1", "10", "100", "1,000", "10,000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := logRange(tt.vs, 1.5)
			if math.Abs(lo-tt.wantLo) > 1e-9 || math.Abs(hi-tt.wantHi) > 1e-9 {
				t.Errorf("logRange = [%v, %v], want [%v, %v]", lo, hi, tt.wantLo, tt.wantHi)
			}
			var labels []string
			for _, tk := range (logTicks{}).Ticks(lo, hi) {
				if tk.Value < lo || tk.Value > hi {
					t.Errorf("tick %v outside [%v, %v]", tk.Value, lo, hi)
				}
				if tk.Label != "" {
					labels = append(labels, tk.Label)
				}
			}
			if !slices.Equal(labels, tt.wantLabels) {
				t.Errorf("labels %q, want %q", labels, tt.wantLabels)
			}
		})
	}
}
