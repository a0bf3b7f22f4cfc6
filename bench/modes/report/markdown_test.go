package report

import (
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/modes"
	"kproxy.dev/kproxy/bench/testkit"
)

// fixture reads a results file from bench/modes/testdata.
func fixture(t *testing.T, name string) modes.Run {
	t.Helper()
	run, err := modes.ReadRun(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func TestMarkdownGolden(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		edit    func(*modes.Run)
		golden  string
	}{
		{name: "full run", fixture: "results.json", golden: "bench-modes.md.golden"},
		{
			name: "host section only, one size", fixture: "results.json", golden: "bench-modes-one-size.md.golden",
			edit: func(r *modes.Run) {
				r.Sections = r.Sections[:1]
				var cells []modes.Cell
				for _, c := range r.Sections[0].Cells {
					if c.Services == 1 {
						cells = append(cells, c)
					}
				}
				r.Sections[0].Cells = cells
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := fixture(t, tt.fixture)
			if tt.edit != nil {
				tt.edit(&run)
			}
			testkit.Golden(t, filepath.Join("..", "testdata", tt.golden), Markdown(run))
		})
	}
}

// TestMarkdownContent checks what a reader must find, independently of the
// golden file (which an update rewrites wholesale).
func TestMarkdownContent(t *testing.T) {
	md := Markdown(fixture(t, "results.json"))
	for _, want := range []string{
		"2026-11-26 09:14 UTC",
		"took 25 min 43 s",
		"Linux 6.18.0-kproxy, 2 CPUs (AMD EPYC 7B13)",
		"`make bench-modes` at commit `ce74e9a1d2c3`",
		"[^1]: Skipped: RLIMIT_NOFILE 20000 (needs about 30,000)",
		"Not measured: no answer within 30 s",
		"ratios within the guest only",
		"](latency.png)",
		"](ratios-guest.png)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	host := strings.Index(md, "## Host kernel")
	guest := strings.Index(md, "## Guest kernel")
	if host < 0 || guest < host {
		t.Errorf("want the host section (at %d) before the guest section (at %d)", host, guest)
	}
	// DNAT has no control plane: no row of it in a control-plane table.
	for _, sec := range strings.Split(md, "### Control plane")[1:] {
		table := strings.Split(sec, "### Data plane")[0]
		if strings.Contains(table, "| dnat ") {
			t.Errorf("a control-plane table has a DNAT row:\n%s", table)
		}
	}
}

// TestMarkdownDegenerate: runs with nothing measured still render a page
// that says so, never a crash.
func TestMarkdownDegenerate(t *testing.T) {
	tests := []struct {
		name string
		run  modes.Run
		want string
	}{
		{name: "empty run", run: modes.Run{}, want: "- **Run:** unknown date, took 0 s"},
		{
			name: "a cell without data or control",
			run: modes.Run{Sections: []modes.Section{{Name: modes.SectionHost, Reference: modes.ModeDNAT,
				Cells: []modes.Cell{{Mode: modes.ModeKproxyNFTables, Services: 5}}}}},
			want: "| kproxy-nftables |        5 |               —[^1] |",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Markdown(tt.run); !strings.Contains(got, tt.want) {
				t.Errorf("the page lacks %q:\n%s", tt.want, got)
			}
		})
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct {
		name string
		f    func(float64) string
		in   float64
		want string
	}{
		{"rate three digits", fmtRate, 18347, "18,300"},
		{"rate small", fmtRate, 905.4, "905"},
		{"rate tiny", fmtRate, 12.34, "12.3"},
		{"rate large", fmtRate, 1234567, "1,230,000"},
		{"seconds below a second", fmtNum, 0.0123, "0.012"},
		{"seconds tiny", fmtNum, 0.0042, "0.0042"},
		{"seconds", fmtNum, 3.517, "3.52"},
		{"tens", fmtNum, 12.34, "12.3"},
		{"thousands", fmtNum, 12345.6, "12,346"},
		{"zero", fmtNum, 0, "0.000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f(tt.in); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFmtDuration(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{{12.4, "12 s"}, {1542.7, "25 min 43 s"}, {3725, "1 h 2 min 5 s"}}
	for _, tt := range tests {
		if got := fmtDuration(tt.in); got != tt.want {
			t.Errorf("fmtDuration(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
