package modes_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/modes"
	"kproxy.dev/kproxy/bench/modes/report"
)

// TestBenchModesTiny runs the whole host section at one service with short
// runs, so `make test` keeps it working: every host mode must be measured,
// and the table and the JSON written (bench/analysis tests the plots drawn
// from such a file). The guest section, as RunAll runs it, is
// TestRunGuestSection's: booting the guest here too would double the
// package's time for the same check.
func TestBenchModesTiny(t *testing.T) {
	t.Parallel() // beside TestRunGuestSection
	cfg := modes.DefaultConfig()
	cfg.Sizes, cfg.GuestSizes = []int{1}, []int{1}
	cfg.RunSeconds, cfg.Repeats, cfg.NewServiceRepeats = 0.3, 1, 1
	cfg.Guest = false
	run, ok := modes.RunAll(t, cfg, "TestBenchModesTiny")
	if !ok || t.Failed() {
		return
	}

	host := section(t, run, modes.SectionHost)
	for _, id := range append([]string{modes.ModeDNAT}, modes.HostModes()...) {
		checkCell(t, host, id, 1, id != modes.ModeDNAT)
	}
	if len(run.Sections) != 1 {
		t.Errorf("%d sections, want the host's alone (Guest false)", len(run.Sections))
	}

	dir := t.TempDir()
	writeOutputs(t, run, dir)
	md, err := os.ReadFile(filepath.Join(dir, "bench-modes.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range modes.HostModes() {
		if !strings.Contains(string(md), id) {
			t.Errorf("bench-modes.md does not name mode %s:\n%s", id, md)
		}
	}
	back, err := modes.ReadRun(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if moved := report.Compare(back, run); len(moved) != 0 {
		t.Errorf("a run compared with itself moved: %v", moved)
	}
}

func section(t *testing.T, run modes.Run, name string) modes.Section {
	t.Helper()
	for _, s := range run.Sections {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no %s section in the results", name)
	return modes.Section{}
}

// checkCell checks that a cell was measured: every workload answered, and
// (for a proxy) the control-plane figures taken.
func checkCell(t *testing.T, s modes.Section, id string, size int, proxy bool) {
	t.Helper()
	c, ok := s.Cell(id, size)
	switch {
	case !ok:
		t.Errorf("%s: no cell for %s at %d", s.Name, id, size)
		return
	case c.Skipped != "":
		t.Errorf("%s: %s at %d skipped: %s", s.Name, id, size, c.Skipped)
		return
	}
	for _, w := range modes.Workloads() {
		if d, ok := c.Data[w]; !ok || d.Rate <= 0 || d.CPUPerOp <= 0 {
			t.Errorf("%s: %s at %d: workload %s = %+v", s.Name, id, size, w, d)
		}
		if r, ok := s.Ratio(id, size, w); !ok || r <= 0 {
			t.Errorf("%s: %s at %d: no ratio to %s for %s", s.Name, id, size, s.Reference, w)
		}
	}
	if !proxy {
		return
	}
	if c.Control == nil || c.Control.FirstSync <= 0 || c.Control.CPU <= 0 || c.Control.RSS <= 0 {
		t.Errorf("%s: %s at %d: control plane %+v", s.Name, id, size, c.Control)
		return
	}
	for name, v := range map[string]float64{modes.FigureChange: c.Control.Change, modes.FigureNewService: c.Control.NewService} {
		if _, missing := c.Control.Missing[name]; v <= 0 && !missing {
			t.Errorf("%s: %s at %d: %s neither measured nor said missing: %+v", s.Name, id, size, name, c.Control)
		}
	}
}
