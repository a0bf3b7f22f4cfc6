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
	"kproxy.dev/kproxy/bench/modes"
)

const usage = "usage: bench-plots [-out DIR] RESULTS.json   draw the plots into DIR (default: the results file's)\n"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is an error of the arguments or the results file: exit
// status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func badUsage(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

func run(args []string, stdout, stderr io.Writer) int {
	err := runErr(args, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		return 2
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "bench-plots: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "bench-plots: %v\n", err)
		return 1
	}
}

func runErr(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench-plots", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "", "directory for the plots (default: the results file's)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return badUsage("%v", err)
	}
	if fs.NArg() != 1 {
		return badUsage("want one results file, got %d arguments", fs.NArg())
	}
	path := fs.Arg(0)
	r, err := modes.ReadRun(path)
	if err != nil {
		return badUsage("%v", err)
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
