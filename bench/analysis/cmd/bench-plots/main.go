// Command bench-plots draws the figures of the side-by-side benchmark
// (bench/modes) from its results file, as PNG and SVG next to the
// bench-modes.md page that links them:
//
//	bench-plots [-out DIR] RESULTS.json
//
// DIR defaults to the results file's directory. make bench-modes runs it
// after the benchmark has written results.json; bench-compare -render
// rewrites the page. It prints the paths it wrote.
//
// Exit status: 0 when it wrote every plot, 1 when drawing or writing
// failed, 2 on bad arguments or an unreadable results file (a missing
// file, bad JSON, another schema version).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"kproxy.dev/kproxy/bench/analysis/plots"
	"kproxy.dev/kproxy/bench/cliexit"
	"kproxy.dev/kproxy/bench/modes"
)

const usage = "usage: bench-plots [-out DIR] RESULTS.json   draw the plots into DIR (default: the results file's)\n"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cliexit.Status("bench-plots", usage, runErr(args, stdout), stderr)
}

func runErr(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench-plots", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "", "directory for the plots (default: the results file's)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cliexit.BadUsage("%v", err)
	}
	if fs.NArg() != 1 {
		return cliexit.BadUsage("want one results file, got %d arguments", fs.NArg())
	}
	path := fs.Arg(0)
	r, err := modes.ReadRun(path)
	if err != nil {
		return cliexit.BadUsage("%v", err)
	}
	dir := *out
	if dir == "" {
		dir = filepath.Dir(path)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the output directory: %w", err)
	}
	written, err := plots.Draw(r, dir)
	for _, p := range written {
		fmt.Fprintln(stdout, p)
	}
	if err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	return nil
}
