// Command bench-compare reads the results of the side-by-side benchmark
// (bench/modes, results.json).
//
//	bench-compare OLD.json NEW.json
//
// prints the figures that moved between two runs by more than the noise
// the runs measured themselves (report.Compare), and what only one run
// has; "No figure moved beyond its noise." when nothing did.
//
//	bench-compare -render RESULTS.json [-out DIR]
//
// (re)writes DIR/bench-modes.md from a results file; DIR defaults to the
// results file's directory. The plots the page links are drawn by
// bench/analysis's bench-plots, a module of its own so that the plotting
// library stays out of kproxy's go.mod.
//
// Exit status: 0 when it printed or wrote what was asked, 1 when writing
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

	"kproxy.dev/kproxy/bench/cliexit"
	"kproxy.dev/kproxy/bench/modes"
	"kproxy.dev/kproxy/bench/modes/report"
)

// MarkdownFile is the page -render writes, next to the plots it links.
const MarkdownFile = "bench-modes.md"

const usage = `usage:
  bench-compare OLD.json NEW.json           print the figures that moved beyond their noise
  bench-compare -render RESULTS.json [-out DIR]
                                            write DIR/` + MarkdownFile + `
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cliexit.Status("bench-compare", usage, runErr(args, stdout), stderr)
}

func runErr(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench-compare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	render := fs.String("render", "", "results file to render")
	out := fs.String("out", "", "directory for "+MarkdownFile+" (default: the results file's)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cliexit.BadUsage("%v", err)
	}
	if *render != "" {
		if fs.NArg() != 0 {
			return cliexit.BadUsage("-render takes no other arguments, got %q", fs.Args())
		}
		return renderRun(*render, *out, stdout)
	}
	if *out != "" {
		return cliexit.BadUsage("-out goes with -render")
	}
	if fs.NArg() != 2 {
		return cliexit.BadUsage("want OLD.json NEW.json, got %d arguments", fs.NArg())
	}
	oldRun, err := modes.ReadRun(fs.Arg(0))
	if err != nil {
		return cliexit.BadUsage("old run: %v", err)
	}
	newRun, err := modes.ReadRun(fs.Arg(1))
	if err != nil {
		return cliexit.BadUsage("new run: %v", err)
	}
	if err := report.CheckComparable(oldRun, newRun); err != nil {
		return cliexit.BadUsage("%v", err)
	}
	_, err = io.WriteString(stdout, report.FormatComparison(oldRun, newRun))
	return err
}

func renderRun(path, dir string, stdout io.Writer) error {
	r, err := modes.ReadRun(path)
	if err != nil {
		return cliexit.BadUsage("%v", err)
	}
	if dir == "" {
		dir = filepath.Dir(path)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the output directory: %w", err)
	}
	md := filepath.Join(dir, MarkdownFile)
	if err := os.WriteFile(md, []byte(report.Markdown(r)), 0o644); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	_, err = fmt.Fprintln(stdout, md)
	return err
}
