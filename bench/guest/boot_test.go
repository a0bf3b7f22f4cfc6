package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// These tests boot the real guest kernel on the host, with this test
// binary as both the guest's init and its program (see TestMain).

// requireUML fails, rather than skips, without the guest kernel: make test
// installs it, like every other tool the tests need.
func requireUML(t *testing.T) {
	t.Helper()
	if _, err := findKernel("", packagedKernel); err != nil {
		t.Fatal(err)
	}
	if err := checkGuestTools(); err != nil {
		t.Fatal(err)
	}
}

// bootConfig is a Config for this test binary; the run directories go to a
// directory of the test's own, so a stray UML process can be found by it.
func bootConfig(t *testing.T, helper string, env ...string) (Config, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cfg := Config{
		TempDir: t.TempDir(),
		Dir:     t.TempDir(),
		Env:     append(append(os.Environ(), helperEnv+"="+helper), env...),
		Stdout:  &stdout,
		Stderr:  &stderr,
	}
	return cfg, &stdout, &stderr
}

// checkNothingLeft fails when a UML process of the run, or its run
// directory, survived Run.
func checkNothingLeft(t *testing.T, cfg Config) {
	t.Helper()
	if pids := processesMentioning(cfg.TempDir); len(pids) > 0 {
		t.Errorf("UML processes %v of this run still exist after Run returned", pids)
	}
	entries, err := os.ReadDir(cfg.TempDir)
	if err != nil || len(entries) > 0 {
		t.Errorf("run directory left behind in %s: %v %v", cfg.TempDir, entries, err)
	}
}

// processesMentioning lists live processes whose command line contains s
// (UML's carries uml_dir=<run directory>).
func processesMentioning(s string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if state, _, ok := statStateAndGroup(string(stat)); err == nil && ok && state != "Z" {
			pid, _ := strconv.Atoi(filepath.Base(d))
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestRunReportsTheProgramsExitAndOutput(t *testing.T) {
	requireUML(t)
	// Arguments no kernel command line could carry.
	args := []string{"-test.run=^TestA$|B", "two words", "", "new\nline", `quote"s`, "ünïcode"}
	for _, tc := range []struct {
		name        string
		helper      string
		exit        string
		noNetfilter bool
		wantCode    int
	}{
		{"exit 0", "report", "0", false, 0},
		{"exit 3", "report", "3", false, 3},
		{"killed by SIGKILL", "kill-self", "", false, 128 + 9},
		{"without netfilter", "report", "0", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, stdout, stderr := bootConfig(t, tc.helper, helperExitEnv+"="+tc.exit)
			cfg.NoNetfilter = tc.noNetfilter
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			code, err := Run(context.Background(), cfg, append([]string{self}, args...))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.wantCode, stderr)
			}
			checkNothingLeft(t, cfg)
			if tc.helper != "report" {
				return
			}
			var got helperReport
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("stdout %q: %v", stdout, err)
			}
			want := helperReport{Args: args, Dir: cfg.Dir, Hostname: guestHostname, InGuest: true, ExitEnv: tc.exit,
				WithoutNetfilter: tc.noNetfilter, ModulesDisabled: "0"}
			if tc.noNetfilter {
				want.ModulesDisabled = "1"
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("what the program saw in the guest (-want +got):\n%s", diff)
			}
			if stderr.String() != "to stderr\n" {
				t.Errorf("stderr = %q, want the program's own line, nothing else", stderr)
			}
			// The guest wrote into an overlay: the host directory is unchanged.
			if _, err := os.Stat(filepath.Join(cfg.Dir, helperFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the guest's write reached the host's %s (stat: %v)", cfg.Dir, err)
			}
		})
	}
}

// failingWriter fails every write once the program said "ready", like a
// pipe whose reader exited.
type failingWriter struct {
	mu    sync.Mutex
	ready chan struct{}
	seen  bool
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen {
		return 0, errors.New("broken pipe")
	}
	if bytes.Contains(p, []byte("ready\n")) {
		w.seen = true
		close(w.ready)
	}
	return len(p), nil
}

func TestRunKillsTheGuest(t *testing.T) {
	requireUML(t)
	for _, tc := range []struct {
		name string
		// stop ends the run once the program runs; it returns what Run's
		// error must say.
		stop func(cancel context.CancelFunc, out *failingWriter) string
	}{
		{"when the context ends", func(cancel context.CancelFunc, _ *failingWriter) string {
			cancel()
			return "guest run stopped (context canceled): UML killed"
		}},
		{"when its output cannot be written", func(context.CancelFunc, *failingWriter) string {
			// Nothing to do: the program's next line fails to be written.
			return "guest run stopped (writing the program's output: broken pipe): UML killed"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, _ := bootConfig(t, "hang")
			out := &failingWriter{ready: make(chan struct{})}
			cfg.Stdout = out
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				code int
				err  error
			}
			done := make(chan result, 1)
			self, _ := os.Executable()
			go func() {
				code, err := Run(ctx, cfg, []string{self})
				done <- result{code, err}
			}()
			select {
			case <-out.ready:
			case r := <-done:
				t.Fatalf("Run returned before the program was ready: %d, %v", r.code, r.err)
			case <-time.After(2 * time.Minute):
				t.Fatal("the program never started in the guest")
			}
			stopped := time.Now()
			want := tc.stop(cancel, out)
			r := <-done
			if r.err == nil || !strings.Contains(r.err.Error(), want) {
				t.Errorf("Run = %d, %v; want an error saying %q", r.code, r.err, want)
			}
			if d := time.Since(stopped); d > killWait {
				t.Errorf("Run took %v to return", d)
			}
			checkNothingLeft(t, cfg)
		})
	}
}

// TestKilledRunnerLeavesNoGuest: SIGKILL of the process running Run (no
// chance to clean up) still takes every UML process with it.
func TestKilledRunnerLeavesNoGuest(t *testing.T) {
	requireUML(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: only as root does UML get the PID namespace that makes this hold; run `sudo make test`")
	}
	tmp := t.TempDir()
	self, _ := os.Executable()
	runner := exec.Command(self)
	runner.Env = append(os.Environ(), helperEnv+"=runner", runnerTempDirEnv+"="+tmp)
	stdout, err := runner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = runner.Wait()
			t.Fatal("the runner ended before the program was ready")
		}
	case <-time.After(2 * time.Minute):
		_ = runner.Process.Kill()
		_ = runner.Wait()
		t.Fatal("the program never started in the guest")
	}
	if len(processesMentioning(tmp)) == 0 {
		t.Fatal("no UML process found while the guest runs: the check below would prove nothing")
	}
	_ = runner.Process.Kill()
	_ = runner.Wait()
	deadline := time.Now().Add(killWait)
	for {
		left := processesMentioning(tmp)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("UML processes %v outlived their SIGKILLed runner by %v", left, killWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunReportsAFailedInit(t *testing.T) {
	requireUML(t)
	cfg, _, _ := bootConfig(t, "report")
	cfg.Modules = []string{"no_such_module"}
	self, _ := os.Executable()
	code, err := Run(context.Background(), cfg, []string{self})
	if err == nil || !strings.Contains(err.Error(), "guest init failed: loading kernel modules") ||
		!strings.Contains(err.Error(), "no_such_module") {
		t.Errorf("Run = %d, %v; want the init's modprobe failure", code, err)
	}
	checkNothingLeft(t, cfg)
}

// TestRunRefusesNetfilterModulesWithoutNetfilter: asking a guest without
// netfilter for a netfilter module fails before the boot, naming it.
func TestRunRefusesNetfilterModulesWithoutNetfilter(t *testing.T) {
	requireUML(t)
	cfg, _, _ := bootConfig(t, "report")
	cfg.NoNetfilter, cfg.Modules = true, []string{"vxlan", "nf_nat"}
	self, _ := os.Executable()
	code, err := Run(context.Background(), cfg, []string{self})
	if err == nil || !strings.Contains(err.Error(), "module nf_nat is part of netfilter") {
		t.Errorf("Run = %d, %v; want the netfilter module refused", code, err)
	}
	checkNothingLeft(t, cfg)
}

func TestFindKernelSaysHowToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findKernel("", filepath.Join(t.TempDir(), "linux.uml"))
	if err == nil || !strings.Contains(err.Error(), "apt-get install user-mode-linux") {
		t.Errorf("findKernel without UML = %v, want the install hint", err)
	}
	if _, err := findKernel("/nonexistent/linux.uml"); err == nil || !strings.Contains(err.Error(), "/nonexistent/linux.uml") {
		t.Errorf("findKernel of a missing path = %v, want it named", err)
	}
}

// TestDefaultModulesExist: every default module is in the guest kernel's
// module tree (or built in), so a typo fails here, not in every guest boot.
func TestDefaultModulesExist(t *testing.T) {
	requireUML(t)
	releases, err := os.ReadDir(ModuleRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range releases {
		known := map[string]bool{}
		for _, index := range []string{"modules.dep", "modules.builtin"} {
			data, err := os.ReadFile(filepath.Join(ModuleRoot, rel.Name(), index))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(data), "\n") {
				path, _, _ := strings.Cut(line, ":")
				name := strings.TrimSuffix(filepath.Base(path), ".ko")
				known[strings.ReplaceAll(name, "-", "_")] = true
			}
		}
		for _, m := range DefaultModules() {
			if !known[m] {
				t.Errorf("kernel %s has no module %s", rel.Name(), m)
			}
		}
	}
}

// TestRunEndsAGuestThatHangsAfterReporting stands a shell script in for the
// kernel, to reproduce a UML that reports the program's result and then
// never exits (seen once: spinning after "reboot: System halted"). Run must
// kill it once haltGrace has passed and return the result; a guest that has
// not finished writing its result is waited for until the context ends.
func TestRunEndsAGuestThatHangsAfterReporting(t *testing.T) {
	requireUML(t) // Run checks the guest's tools before it boots
	for _, tc := range []struct {
		name     string
		result   string // what the stand-in writes to its exit-code file
		wantCode int
		wantErr  string
	}{
		{name: "result written", result: `7\n`, wantCode: 7},
		{name: "result incomplete", result: `7`, wantCode: -1, wantErr: "guest run stopped (context deadline exceeded)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kernel := filepath.Join(t.TempDir(), "hanging-kernel")
			script := `#!/bin/sh
for a in "$@"; do case "$a" in ` + envSharedDir + `=*) shared="${a#*=}";; esac; done
printf '` + tc.result + `' > "$shared/` + exitCodeFile + `"
exec sleep 600
`
			if err := os.WriteFile(kernel, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg, _, _ := bootConfig(t, "unused")
			cfg.Kernel, cfg.haltGrace = kernel, 300*time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			code, err := Run(ctx, cfg, []string{"/bin/true"})
			if code != tc.wantCode || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Run = %d, %v; want %d and an error saying %q", code, err, tc.wantCode, tc.wantErr)
			}
			if tc.wantErr == "" && time.Since(start) > 2*time.Second {
				t.Errorf("Run took %v, want about haltGrace (%v) after the result", time.Since(start), cfg.haltGrace)
			}
			checkNothingLeft(t, cfg)
		})
	}
}

// TestNetfilterModulesAreNamed: IsNetfilterModule names exactly the guest
// kernel's netfilter modules (those in a net/…/netfilter directory, plus
// br_netfilter and bpfilter), so a guest without netfilter misses none.
func TestNetfilterModulesAreNamed(t *testing.T) {
	requireUML(t)
	releases, err := os.ReadDir(ModuleRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range releases {
		data, err := os.ReadFile(filepath.Join(ModuleRoot, rel.Name(), "modules.dep"))
		if err != nil {
			t.Fatal(err)
		}
		netfilter := 0
		for _, line := range strings.Split(string(data), "\n") {
			path, _, _ := strings.Cut(line, ":")
			if path == "" {
				continue
			}
			name := strings.TrimSuffix(filepath.Base(path), ".ko")
			want := strings.Contains(path, "/netfilter/") || name == "br_netfilter" || name == "bpfilter"
			if want {
				netfilter++
			}
			if got := IsNetfilterModule(name); got != want {
				t.Errorf("kernel %s: IsNetfilterModule(%q) = %v, want %v (%s)", rel.Name(), name, got, want, path)
			}
		}
		if netfilter < 100 {
			t.Errorf("kernel %s: only %d netfilter modules found; is the module tree whole?", rel.Name(), netfilter)
		}
	}
}
