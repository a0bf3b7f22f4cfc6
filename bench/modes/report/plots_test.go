package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/modes"
)

func TestPlots(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*modes.Run)
		plots []string
	}{
		{name: "full run", plots: []string{PlotLatency, PlotNewConn, PlotRatios, PlotRatiosGuest}},
		{
			name:  "host only, one size",
			plots: []string{PlotLatency, PlotNewConn, PlotRatios},
			edit: func(r *modes.Run) {
				r.Sections = r.Sections[:1]
				r.Sections[0].Cells = slices.DeleteFunc(r.Sections[0].Cells, func(c modes.Cell) bool { return c.Services != 1 })
			},
		},
		{
			name:  "skipped and missing everywhere",
			plots: []string{PlotLatency, PlotNewConn, PlotRatios, PlotRatiosGuest},
			edit: func(r *modes.Run) {
				for si := range r.Sections {
					for ci := range r.Sections[si].Cells {
						c := &r.Sections[si].Cells[ci]
						switch {
						case c.Mode == modes.ModeDNAT && c.Services == 1:
							c.Skipped = "the reference failed"
						case c.Control != nil:
							c.Control.Missing = map[string]string{FigureChange: "timed out", FigureNewService: "timed out"}
							delete(c.Data, modes.WorkloadNewConn)
						}
					}
				}
			},
		},
		{name: "no sections", plots: []string{PlotLatency, PlotNewConn, PlotRatios}, edit: func(r *modes.Run) { r.Sections = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := fixture(t, "results.json")
			if tt.edit != nil {
				tt.edit(&run)
			}
			dir := t.TempDir()
			got, err := Plots(run, dir)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, p := range tt.plots {
				want = append(want, filepath.Join(dir, p+".png"), filepath.Join(dir, p+".svg"))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Plots wrote %q, want %q", got, want)
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
		if strings.HasPrefix(filepath.Base(path), PlotRatios) {
			label = "rate ÷ dnat rate"
		}
		if !strings.Contains(string(data), label) {
			t.Errorf("%s lacks its axis label %q", path, label)
		}
	default:
		t.Errorf("unexpected file %s", path)
	}
}

// TestPlotsDeterministic: the same results draw the same bytes, so
// re-rendering a results file changes nothing in the repository.
func TestPlotsDeterministic(t *testing.T) {
	run := fixture(t, "results.json")
	a, b := t.TempDir(), t.TempDir()
	pa, err := Plots(run, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Plots(run, b); err != nil {
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

func TestPlotsUnwritableDir(t *testing.T) {
	if _, err := Plots(fixture(t, "results.json"), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Plots into a missing directory: want an error")
	}
}
