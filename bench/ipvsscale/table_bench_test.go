package ipvsscale

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/guest"
)

// tableEnv names the file the Markdown table is also written to.
const tableEnv = "KPROXY_BENCH_TABLE"

// BenchmarkIPVSScale prints the IPVS sync table: per size, the
// desired-state build on this host and BenchmarkGuestIPVSSync in a guest
// kernel it boots for that size (this test binary is the guest's init and
// its program, so no -exec is needed). Run it on the host with
//
//	TMPDIR=/var/tmp go test -run '^$' -bench '^BenchmarkIPVSScale$' -benchtime 1x -timeout 30m ./bench/ipvsscale/
func BenchmarkIPVSScale(b *testing.B) {
	if guest.InGuest() {
		b.Skip("boots guest kernels of its own: run it on the host")
	}
	s, err := SettingsFromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	started := time.Now()
	var guestKernel string
	// A sub-benchmark called again for a larger b.N reports its first
	// measurement instead of booting another guest.
	measured := map[int]Row{}
	for _, n := range s.Sizes {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			row, ok := measured[n]
			if !ok {
				var kernel string
				row, kernel = measureRow(b, s, n)
				measured[n] = row
				guestKernel = firstNonEmpty(guestKernel, kernel)
			}
			reportRow(b, row)
		})
	}

	table := &Table{
		Header: tableHeader(s, guestKernel, time.Since(started)),
		Notes:  tableNotes(s),
	}
	for _, n := range s.Sizes {
		row, ok := measured[n]
		if !ok {
			row = Row{Ports: n}
		}
		table.Rows = append(table.Rows, row)
	}
	md := table.Markdown()
	fmt.Printf("\n%s\n", md)
	if out := os.Getenv(tableEnv); out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			b.Errorf("writing the table to %s=%s: %v", tableEnv, out, err)
		}
	}
}

// measureRow measures one size: the host half here, the guest half in a
// guest booted for it. A guest half that fails is reported and leaves
// Row.Guest nil, so the table shows the row as failed.
func measureRow(b *testing.B, s Settings, n int) (row Row, guestKernel string) {
	row = Row{Ports: n}
	w := Workload{Ports: n, Endpoints: EndpointsPerPort}
	build, err := MeasureBuild(w, BuildRuns)
	if err != nil {
		b.Fatal(err)
	}
	row.Build = build

	out, err := runGuestHalf(s, n)
	if err != nil {
		b.Errorf("%s: guest half: %v", w, err)
		return row, out.Kernel
	}
	res, ok := out.Results[n]
	if !ok {
		b.Errorf("%s: the guest run reported no BenchmarkGuestIPVSSync/ports=%d result (see its output above)", w, n)
		return row, out.Kernel
	}
	row.Guest = &res
	return row, out.Kernel
}

// runGuestHalf boots the guest and runs BenchmarkGuestIPVSSync there for
// n ports alone, its output going to this process's and to the parser.
func runGuestHalf(s Settings, n int) (GuestOutput, error) {
	self, err := os.Executable()
	if err != nil {
		return GuestOutput{}, fmt.Errorf("finding this test binary: %w", err)
	}
	argv := []string{self, "-test.run=^$", "-test.bench=^BenchmarkGuestIPVSSync$",
		"-test.benchtime=" + strconv.Itoa(s.Changes) + "x", "-test.timeout=" + flagValue("test.timeout", "0")}
	ctx, cancel := context.WithTimeout(context.Background(), guest.TimeoutFor(argv[1:]))
	defer cancel()
	var captured bytes.Buffer
	cfg := guest.Config{
		Mem:    s.GuestMem,
		Env:    append(withoutVar(os.Environ(), SizesEnv), SizesEnv+"="+strconv.Itoa(n)),
		Stdout: io.MultiWriter(os.Stdout, &captured),
		Stderr: os.Stderr,
	}
	code, runErr := guest.Run(ctx, cfg, argv)
	out, parseErr := ParseGuestOutput(&captured)
	switch {
	case runErr != nil:
		return out, fmt.Errorf("running the guest: %w", runErr)
	case code != 0:
		return out, fmt.Errorf("BenchmarkGuestIPVSSync exited with status %d in the guest (see its output above)", code)
	}
	return out, parseErr
}

func reportRow(b *testing.B, r Row) {
	b.ReportMetric(0, "ns/op") // nothing here is per iteration
	b.ReportMetric(float64(r.Build.Microseconds())/1000, "ms/desired-build")
	if g := r.Guest; g != nil {
		b.ReportMetric(g.FullSync.Seconds(), UnitFullSync)
		b.ReportMetric(float64(g.FullSyncOps), UnitFullSyncOps)
		b.ReportMetric(float64(g.Change.Microseconds())/1000, UnitChange)
		b.ReportMetric(g.ChangeOps, UnitChangeOps)
		b.ReportMetric(float64(g.NoChangeOps), UnitNoChangeOps)
		b.ReportMetric(g.FullResync.Seconds(), UnitFullResync)
		b.ReportMetric(float64(g.FullResyncReads), UnitFullResyncReads)
		b.ReportMetric(float64(g.FullResyncEnsures), UnitFullResyncEnsures)
		b.ReportMetric(float64(g.FullResyncWrites), UnitFullResyncWrites)
	}
}

func withoutVar(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// flagValue reads a testing flag of this process, e.g. test.timeout.
func flagValue(name, fallback string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return fallback
}

// firstNonEmpty keeps the first value that is not empty.
func firstNonEmpty(have, next string) string {
	if have != "" {
		return have
	}
	return next
}
