package report

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"kproxy.dev/kproxy/bench/modes"
	"kproxy.dev/kproxy/bench/testkit"
)

// cellRun is a run of one host cell plus the DNAT reference.
func cellRun(c modes.Cell) modes.Run {
	ref := modes.Cell{Mode: modes.ModeDNAT, Services: c.Services, Data: map[string]modes.Workload{
		modes.WorkloadKeepAlive: {Rate: 20000, Rates: []float64{19800, 20000, 20200}},
	}}
	return modes.Run{Version: modes.SchemaVersion, Sections: []modes.Section{{
		Name: modes.SectionHost, Reference: modes.ModeDNAT, Cells: []modes.Cell{ref, c},
	}}}
}

func rateCell(rate float64, rates ...float64) modes.Cell {
	return modes.Cell{Mode: modes.ModeKproxyNFTables, Services: 1000, Data: map[string]modes.Workload{
		modes.WorkloadNewConn: {Rate: rate, Rates: rates},
	}}
}

func controlCell(c modes.Control) modes.Cell {
	return modes.Cell{Mode: modes.ModeKproxyNFTables, Services: 1000, Control: &c}
}

func TestCompare(t *testing.T) {
	at := Change{Section: modes.SectionHost, Mode: modes.ModeKproxyNFTables, Services: 1000}
	with := func(figure string, old, new, delta, noise float64, worse bool) Change {
		c := at
		c.Figure, c.Old, c.New, c.Delta, c.Noise, c.Worse = figure, old, new, delta, noise, worse
		return c
	}
	tests := []struct {
		name     string
		old, new modes.Cell
		want     []Change
	}{
		{
			name: "identical runs",
			old:  rateCell(9000, 8900, 9000, 9100), new: rateCell(9000, 8900, 9000, 9100),
		},
		{
			name: "noise-free runs, small move under the floor",
			old:  rateCell(9000, 9000, 9000, 9000), new: rateCell(9360, 9360, 9360, 9360),
		},
		{
			name: "noise-free runs, move over the floor",
			old:  rateCell(9000, 9000, 9000, 9000), new: rateCell(9900, 9900, 9900, 9900),
			want: []Change{with(modes.WorkloadNewConn, 9000, 9900, 0.1, NoiseFloor, false)},
		},
		{
			name: "a drop beyond both runs' spread",
			old:  rateCell(9000, 8820, 9000, 9270), new: rateCell(6300, 6200, 6300, 6400),
			want: []Change{with(modes.WorkloadNewConn, 9000, 6300, -0.3, 0.05, true)},
		},
		{
			name: "a drop within the new run's spread",
			old:  rateCell(9000, 8900, 9000, 9100), new: rateCell(8100, 7000, 8100, 8500),
		},
		{
			name: "rate measured once: the once floor",
			old:  rateCell(9000, 9000), new: rateCell(7200, 7200),
		},
		{
			name: "rate measured once, beyond the once floor",
			old:  rateCell(9000), new: rateCell(6000),
			want: []Change{with(modes.WorkloadNewConn, 9000, 6000, -1.0/3, OnceFloor, true)},
		},
		{
			name: "zero rate is not compared",
			old:  rateCell(0, 0, 0, 0), new: rateCell(9000, 9000, 9000, 9000),
		},
		{
			name: "one change doubled, beyond its spread",
			old:  controlCell(modes.Control{Change: 0.1, ChangeAll: []float64{0.09, 0.1, 0.11}}),
			new:  controlCell(modes.Control{Change: 0.2, ChangeAll: []float64{0.18, 0.2, 0.22}}),
			want: []Change{with(modes.FigureChange, 0.1, 0.2, 1, 0.2, true)},
		},
		{
			name: "new service faster but within its wide spread",
			old:  controlCell(modes.Control{NewService: 1, NewServiceAll: []float64{0.5, 1, 1.5}}),
			new:  controlCell(modes.Control{NewService: 0.6, NewServiceAll: []float64{0.55, 0.6, 0.65}}),
		},
		{
			name: "first sync up 20%: under the once floor",
			old:  controlCell(modes.Control{FirstSync: 1}), new: controlCell(modes.Control{FirstSync: 1.2}),
		},
		{
			name: "first sync up 40%, CPU down 30%, RSS up 10%",
			old:  controlCell(modes.Control{FirstSync: 1, CPU: 1, RSS: 100 << 20}),
			new:  controlCell(modes.Control{FirstSync: 1.4, CPU: 0.7, RSS: 110 << 20}),
			want: []Change{
				with(modes.FigureFirstSync, 1, 1.4, 0.4, OnceFloor, true),
				with(modes.FigureCPU, 1, 0.7, -0.3, OnceFloor, false),
			},
		},
		{
			name: "a figure missing in one run is not compared",
			old:  controlCell(modes.Control{FirstSync: 1}),
			new:  controlCell(modes.Control{FirstSync: 3, Missing: map[string]string{modes.FigureFirstSync: "timed out"}}),
		},
		{
			name: "a cell skipped in one run is not compared",
			old:  rateCell(9000, 9000, 9000, 9000),
			new:  modes.Cell{Mode: modes.ModeKproxyNFTables, Services: 1000, Skipped: "no descriptors"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compare(cellRun(tt.old), cellRun(tt.new))
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-9), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Compare (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOnlyInOne(t *testing.T) {
	skipped := modes.Cell{Mode: modes.ModeKproxyNFTables, Services: 1000, Skipped: "no descriptors"}
	tests := []struct {
		name     string
		old, new modes.Run
		want     []string
	}{
		{name: "same cells", old: cellRun(rateCell(9000)), new: cellRun(rateCell(5000))},
		{
			name: "skipped in the new run",
			old:  cellRun(rateCell(9000)), new: cellRun(skipped),
			want: []string{"host kproxy-nftables at 1,000 services: only in the old run (new: skipped: no descriptors)"},
		},
		{name: "skipped in both", old: cellRun(skipped), new: cellRun(skipped)},
		{
			name: "a cell absent from the old run",
			old:  modes.Run{Version: 1, Sections: []modes.Section{{Name: modes.SectionHost, Reference: modes.ModeDNAT}}},
			new:  cellRun(rateCell(9000)),
			want: []string{
				"host dnat at 1,000 services: only in the new run (old: no such cell)",
				"host kproxy-nftables at 1,000 services: only in the new run (old: no such cell)",
			},
		},
		{
			name: "a section absent from the new run",
			old: func() modes.Run {
				r := cellRun(rateCell(9000))
				r.Sections = append(r.Sections, modes.Section{Name: modes.SectionGuest})
				return r
			}(),
			new:  cellRun(rateCell(9000)),
			want: []string{"guest: only in the old run (the new run has no such section)"},
		},
		{
			name: "a workload and a control figure in one run only",
			old: cellRun(modes.Cell{Mode: modes.ModeKproxyNFTables, Services: 1000,
				Data:    map[string]modes.Workload{modes.WorkloadUDPRR: {Rate: 1}},
				Control: &modes.Control{Missing: map[string]string{modes.FigureRSS: "process gone"}}}),
			new: cellRun(modes.Cell{Mode: modes.ModeKproxyNFTables, Services: 1000, Control: &modes.Control{}}),
			want: []string{
				"host kproxy-nftables at 1,000 services: UDP req/resp (req/s): only in the old run (new: not measured)",
				"host kproxy-nftables at 1,000 services: proxy RSS (MiB): only in the new run (old: missing: process gone)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, o := range OnlyInOne(tt.old, tt.new) {
				got = append(got, o.String())
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("OnlyInOne (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckComparable(t *testing.T) {
	ok := modes.Run{Version: modes.SchemaVersion}
	tests := []struct {
		name     string
		old, new modes.Run
		wantErr  string
	}{
		{name: "same version", old: ok, new: ok},
		{name: "old version differs", old: modes.Run{Version: modes.SchemaVersion + 1}, new: ok, wantErr: "the old run has schema version 2"},
		{name: "new version missing", old: ok, new: modes.Run{}, wantErr: "the new run has schema version 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckComparable(tt.old, tt.new)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("CheckComparable: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestFormatComparisonGolden(t *testing.T) {
	old, new := fixture(t, "results.json"), fixture(t, "results-new.json")
	tests := []struct {
		name     string
		old, new modes.Run
		golden   string
	}{
		{name: "moved", old: old, new: new, golden: "compare.golden"},
		{name: "same run", old: old, new: old, golden: "compare-same.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.Golden(t, filepath.Join("..", "testdata", tt.golden), FormatComparison(tt.old, tt.new))
		})
	}
}
