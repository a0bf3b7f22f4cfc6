package modes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/syncscale"
)

// TestGuestModesSection is the guest half of the side-by-side benchmark:
// RunGuestSection runs it in the guest kernel, where it measures the IPVS
// modes next to DNAT and prints the section (GuestSectionPrefix) on stdout.
func TestGuestModesSection(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	guest.SkipWithoutNetfilter(t)
	if os.Getenv(lab.KproxyBinaryEnv) == "" {
		// Building kproxy inside the guest would take minutes.
		t.Skipf("%s is not set: build kproxy on the host (go build -o bin/kproxy ./cmd/kproxy) and pass its path", lab.KproxyBinaryEnv)
	}
	kproxy := lab.KproxyBinary(t) // the one KPROXY_BINARY names
	settings, err := guestSettingsFrom(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv(guestDirEnv)
	if dir == "" {
		// The outer run: the inner one, in its own network namespace, has
		// its output shown only when it ends, so it writes progress and the
		// section to files this one prints from.
		dir = t.TempDir()
		stop := tailLines(filepath.Join(dir, "progress"), func(line string) { fmt.Println(GuestProgressPrefix + line) })
		t.Cleanup(func() {
			stop()
			// Printed even when the inner run failed: the section says
			// which cells did.
			if data, err := os.ReadFile(filepath.Join(dir, "section.json")); err == nil {
				fmt.Println(GuestSectionPrefix + string(data))
			}
		})
	}
	if lab.InFreshNetns(t, guestDirEnv+"="+dir) {
		return
	}

	progressFile, err := os.OpenFile(filepath.Join(dir, "progress"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer progressFile.Close()
	start := time.Now()
	progress := func(line string) {
		line = fmt.Sprintf("[%v] %s", time.Since(start).Round(time.Second), line)
		t.Log(line)
		if _, err := fmt.Fprintln(progressFile, line); err != nil {
			t.Logf("writing progress: %v", err)
		}
	}
	ipvsref := filepath.Join(lab.ToolsBinDir(t), "ipvsref")
	if _, err := os.Stat(ipvsref); err != nil {
		ipvsref = ""
	}
	progress(fmt.Sprintf("building the lab: %d endpoints; sizes %v, %d run(s) of %v per workload", syncscale.EndpointsPerSlice, settings.Sizes, settings.Repeats, settings.RunFor))
	d := NewDataLab(t, syncscale.EndpointsPerSlice)
	g := &guestLab{tb: t, d: d, settings: settings, kproxy: kproxy, ipvsref: ipvsref, dir: t.TempDir(), progress: progress}
	section := g.guestSection(context.Background())
	data, err := json.Marshal(section)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "section.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	progress(fmt.Sprintf("guest section done in %v", time.Since(start).Round(time.Second)))
}

// tailLines calls fn with each line appended to path until stop is
// called (which reads what is left first).
func tailLines(path string, fn func(string)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var offset int64
		var partial string
		read := func() {
			f, err := os.Open(path)
			if err != nil {
				return
			}
			defer f.Close()
			if _, err := f.Seek(offset, io.SeekStart); err != nil {
				return
			}
			data, _ := io.ReadAll(f)
			offset += int64(len(data))
			lines := strings.Split(partial+string(data), "\n")
			partial = lines[len(lines)-1]
			for _, l := range lines[:len(lines)-1] {
				fn(l)
			}
		}
		for {
			select {
			case <-done:
				read()
				return
			case <-time.After(200 * time.Millisecond):
				read()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// TestRunGuestSection runs the guest section end to end at a tiny size, as
// RunAll does (runGuest: guest-exec built, the run's settings passed on):
// guest-exec boots the guest with this test binary, which measures DNAT,
// kproxy's IPVS mode and kube-proxy's for one service and prints the
// section, which RunGuestSection reads back. TestBenchModesTiny leaves the
// guest to this test, so that the package boots it once.
func TestRunGuestSection(t *testing.T) {
	if guest.InGuest() {
		t.Skip("runs the guest from the host")
	}
	lab.RequireRoot(t)
	if _, err := os.Stat("/usr/bin/linux"); err != nil {
		t.Skipf("needs user-mode-linux (/usr/bin/linux): %v", err)
	}
	if testing.Short() {
		t.Skip("boots the guest kernel (-short)")
	}
	// Beside TestBenchModesTiny: the guest (one CPU, mostly waiting) and
	// the host section each take minutes, and neither judges a figure.
	t.Parallel()
	cfg := DefaultConfig()
	cfg.GuestSizes, cfg.RunSeconds, cfg.Repeats = []int{1}, 0.5, 1
	var out syncBuffer
	start := time.Now()
	section, err := runGuest(t, cfg, Binaries{Kproxy: lab.KproxyBinary(t)}, &Progress{Out: &out, Started: start})
	t.Logf("the guest's progress:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the guest section took %v", time.Since(start).Round(100*time.Millisecond))
	if !strings.Contains(out.String(), "guest: ") {
		t.Errorf("no progress lines from the guest")
	}
	if section.Name != SectionGuest || section.Reference != ModeDNAT || !strings.Contains(section.Title, "guest kernel") || len(section.Notes) == 0 {
		t.Errorf("section %q, reference %q, title %q, %d notes", section.Name, section.Reference, section.Title, len(section.Notes))
	}
	var modes []string
	for _, c := range section.Cells {
		modes = append(modes, fmt.Sprintf("%s@%d", c.Mode, c.Services))
		if c.Skipped != "" {
			t.Errorf("%s at %d services skipped: %s", c.Mode, c.Services, c.Skipped)
			continue
		}
		for _, w := range Workloads() {
			if c.Data[w].Rate <= 0 {
				t.Errorf("%s at %d services: %s rate %v", c.Mode, c.Services, w, c.Data[w].Rate)
			}
		}
		if ratio, ok := section.Ratio(c.Mode, c.Services, WorkloadKeepAlive); ok {
			t.Logf("%s: keep-alive %.2f× DNAT's", c.Mode, ratio)
		}
		if c.Mode == ModeDNAT {
			continue
		}
		if c.Control == nil || c.Control.FirstSync <= 0 || c.Control.CPU <= 0 || c.Control.RSS <= 0 {
			t.Errorf("%s: control %+v, want a first sync, CPU and RSS", c.Mode, c.Control)
			continue
		}
		if c.Mode == ModeKproxyIPVS && (len(c.Control.ChangeAll) != guestChanges || c.Control.Change <= 0 ||
			len(c.Control.NewServiceAll) != guestNewServices || c.Control.NewService <= 0) {
			t.Errorf("%s: control %+v, want %d changes and %d new services timed", c.Mode, c.Control, guestChanges, guestNewServices)
		}
		if c.Mode == ModeKubeProxyIPVS && (c.Control.Missing["change"] == "" || c.Control.Missing["newService"] == "") {
			t.Errorf("%s: Missing %v, want the change and new service named", c.Mode, c.Control.Missing)
		}
	}
	if got, want := strings.Join(modes, " "), "dnat@1 kproxy-ipvs@1 kube-proxy-ipvs@1"; got != want {
		t.Errorf("cells %s, want %s", got, want)
	}
}

func TestGuestSettingsFrom(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    guestSettings
		wantErr string
	}{
		{name: "defaults", want: guestSettings{Sizes: []int{1, 1000}, RunFor: 2 * time.Second, Repeats: 2}},
		{
			name: "all set",
			env:  map[string]string{EnvGuestSizes: "1, 10,5000", EnvRunSeconds: "0.5", EnvRepeats: "3"},
			want: guestSettings{Sizes: []int{1, 10, 5000}, RunFor: 500 * time.Millisecond, Repeats: 3},
		},
		{name: "size zero", env: map[string]string{EnvGuestSizes: "0"}, wantErr: `KPROXY_BENCH_GUEST_SIZES="0": "0" is not a service count`},
		{name: "size twice", env: map[string]string{EnvGuestSizes: "1,1"}, want: guestSettings{Sizes: []int{1}, RunFor: 2 * time.Second, Repeats: 2}},
		{name: "too many services", env: map[string]string{EnvGuestSizes: "63001"}, wantErr: "from 1 to 63000"},
		{name: "bad seconds", env: map[string]string{EnvRunSeconds: "-1"}, wantErr: "KPROXY_BENCH_RUN_SECONDS"},
		{name: "bad repeats", env: map[string]string{EnvRepeats: "x"}, wantErr: "KPROXY_BENCH_REPEATS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := guestSettingsFrom(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGuestEnv(t *testing.T) {
	env, timeout, err := guestEnv(GuestOptions{KproxyBinary: "/k", Sizes: []int{1, 1000}, RunSeconds: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"KPROXY_BINARY=/k", "KPROXY_BENCH_GUEST_SIZES=1,1000", "KPROXY_BENCH_RUN_SECONDS=0.5", "KPROXY_BENCH_REPEATS=2"}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if timeout < 10*time.Minute {
		t.Errorf("timeout %v, want at least 10m", timeout)
	}
	if _, _, err := guestEnv(GuestOptions{Sizes: []int{0}}); err == nil {
		t.Errorf("guestEnv accepted 0 services")
	}
}

// TestGuestOutput feeds guestOutput what a guest run prints.
func TestGuestOutput(t *testing.T) {
	section := Section{Name: SectionGuest, Reference: ModeDNAT, Title: "t", Cells: []Cell{{Mode: ModeDNAT, Services: 1,
		Data: map[string]Workload{WorkloadKeepAlive: {Rate: 10, Rates: []float64{10}}}}}}
	line, err := json.Marshal(section)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		out          string
		wantProgress []string
		wantFound    bool
		wantErr      string
	}{
		{
			name: "a run",
			out: "=== RUN   TestGuestModesSection\n" + GuestProgressPrefix + "one\n    inner log " + GuestProgressPrefix + "not at the start\n" +
				GuestProgressPrefix + "two\n" + GuestSectionPrefix + string(line) + "\n--- PASS: TestGuestModesSection\n",
			wantProgress: []string{"one", "two"},
			wantFound:    true,
		},
		{name: "no section", out: GuestProgressPrefix + "one\nFAIL\n", wantProgress: []string{"one"}},
		{name: "two sections", out: GuestSectionPrefix + string(line) + "\n" + GuestSectionPrefix + string(line) + "\n", wantErr: "2 section lines"},
		{name: "bad JSON", out: GuestSectionPrefix + "{\n", wantErr: "decoding the guest's section"},
		{name: "not the guest's", out: GuestSectionPrefix + `{"name":"host","reference":"dnat"}` + "\n", wantErr: `is "host"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var progress []string
			o := &guestOutput{progress: func(s string) { progress = append(progress, s) }}
			o.read(strings.NewReader(tt.out))
			got, found, err := o.result()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantProgress, progress); diff != "" {
				t.Errorf("progress (-want +got):\n%s", diff)
			}
			if found != tt.wantFound {
				t.Fatalf("found %t, want %t", found, tt.wantFound)
			}
			if found {
				if diff := cmp.Diff(section, got); diff != "" {
					t.Errorf("section (-want +got):\n%s", diff)
				}
			}
			if strings.Contains(o.tail(), string(line)) {
				t.Errorf("the output tail holds the whole section line:\n%s", o.tail())
			}
		})
	}
}

func TestGuestOutputTailIsBounded(t *testing.T) {
	o := &guestOutput{}
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	o.read(strings.NewReader(b.String()))
	tail := strings.Split(o.tail(), "\n")
	if len(tail) != guestOutputTail || strings.TrimSpace(tail[len(tail)-1]) != "line 999" || strings.TrimSpace(tail[0]) != fmt.Sprintf("line %d", 1000-guestOutputTail) {
		t.Errorf("tail has %d lines, %q … %q", len(tail), tail[0], tail[len(tail)-1])
	}
}

// syncBuffer is a bytes.Buffer the guest's progress lines can be written
// to while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
