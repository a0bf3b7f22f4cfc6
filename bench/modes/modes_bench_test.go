package modes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/modes"
	"kproxy.dev/kproxy/bench/modes/report"
)

// BenchmarkModes is `make bench-modes`: every mode side by side (see the
// package documentation). Run it with -benchtime 1x and no test timeout:
//
//	sudo go test -run '^$' -bench '^BenchmarkModes$' -benchtime 1x -timeout 0 ./bench/modes/
func BenchmarkModes(b *testing.B) {
	cfg, err := modes.ConfigFromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	if cfg.OutDir == "" {
		cfg.OutDir = filepath.Join(repoRoot(b), "bin", "bench-modes")
	}
	run, ok := modes.RunAll(b, cfg, "make bench-modes"+describeEnv())
	if !ok {
		return
	}
	files := writeOutputs(b, run, cfg.OutDir)
	fmt.Printf("\n%s\nWritten: %s\n", report.Markdown(run), strings.Join(files, ", "))
}

// writeOutputs writes results.json and bench-modes.md into dir and returns
// their paths. The plots are drawn from results.json afterwards, by
// bench/analysis (make bench-modes runs it), whose plotting library
// kproxy's module does not carry.
func writeOutputs(tb testing.TB, run modes.Run, dir string) []string {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	results := filepath.Join(dir, "results.json")
	if err := modes.WriteRun(results, run); err != nil {
		tb.Fatal(err)
	}
	md := filepath.Join(dir, "bench-modes.md")
	if err := os.WriteFile(md, []byte(report.Markdown(run)), 0o644); err != nil {
		tb.Fatal(err)
	}
	return []string{results, md}
}

// describeEnv lists the settings given in the environment, for the
// command line the results record.
func describeEnv() string {
	var set []string
	for _, name := range []string{modes.EnvSizes, modes.EnvModes, modes.EnvRunSeconds, modes.EnvRepeats,
		modes.EnvNewServices, modes.EnvGuest, modes.EnvGuestSizes} {
		if v := os.Getenv(name); v != "" {
			set = append(set, name+"="+v)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return " " + strings.Join(set, " ")
}

// repoRoot is the module's root directory (tests run in the package's).
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		tb.Fatalf("no go.mod two levels above the package: %v", err)
	}
	return dir
}
