// Command kconformance runs upstream's conformance specs against the local
// cluster of make cluster (package kproxy.dev/kproxy/bench/conformance) and
// writes the reports:
//
//	kconformance [-dir CLUSTER_DIR] [-tools DIR] [-out DIR] [-focus RE] [-skip RE] [-title TEXT]
//
// OUT/junit_01.xml is the framework's JUnit report, OUT/e2e.log its output,
// OUT/conformance.md the table of specs and results.
// It exits non-zero when a spec failed or none ran.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"kproxy.dev/kproxy/bench/cluster"
	"kproxy.dev/kproxy/bench/conformance"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kconformance:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", cluster.DefaultStateDir, "the cluster's state directory")
	tools := flag.String("tools", "bench/tools/bin", "directory with e2e.test and kubectl")
	out := flag.String("out", "bin/conformance", "directory for the reports")
	focus := flag.String("focus", conformance.ServicesFocus, "specs to run (ginkgo focus)")
	skip := flag.String("skip", conformance.DefaultSkip, "specs to leave out (ginkgo skip)")
	title := flag.String("title", "Services conformance specs against kproxy", "the table's title")
	timeout := flag.Duration("timeout", time.Hour, "bound on the whole run")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client, err := cluster.AdminClient(*dir)
	if err != nil {
		return err
	}
	if err := conformance.CheckCluster(ctx, client); err != nil {
		return err
	}
	r := conformance.Run{ToolsBin: abs(*tools), Kubeconfig: cluster.AdminKubeconfig(*dir), ReportDir: abs(*out),
		Focus: *focus, Skip: *skip, Timeout: *timeout}
	began := time.Now()
	if err := r.Execute(ctx, os.Stdout); err != nil {
		return err
	}
	specs, err := conformance.ReadJUnitFile(r.JUnitPath())
	if err != nil {
		return err
	}
	table := conformance.Markdown(*title, specs) + fmt.Sprintf("\nRun took %.0fs.\n", time.Since(began).Seconds())
	mdPath := filepath.Join(r.ReportDir, "conformance.md")
	if err := os.WriteFile(mdPath, []byte(table), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", mdPath, err)
	}
	fmt.Printf("\n%s\nWritten to %s (JUnit: %s)\n", table, mdPath, r.JUnitPath())
	if !conformance.AllPassed(specs) {
		return errors.New("not every spec passed")
	}
	return nil
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
