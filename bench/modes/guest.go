package modes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// The guest section (SectionGuest): the IPVS modes, which need the
// user-mode-linux guest kernel, next to the DNAT reference measured there.
// The host benchmark runs the guest half (TestGuestModesSection, in this
// package's own test binary) through guest-exec with RunGuestSection,
// which reads the section back from the guest's output. By hand:
//
//	go build -o bin/guest-exec ./bench/guest/cmd/guest-exec
//	go build -o bin/kproxy ./cmd/kproxy
//	KPROXY_BINARY=$PWD/bin/kproxy KPROXY_BENCH_GUEST_SIZES=1 \
//	  go test -exec "$PWD/bin/guest-exec" -run '^TestGuestModesSection$' -v ./bench/modes/

// Environment of TestGuestModesSection: RunGuestSection sets the
// benchmark's own (EnvGuestSizes, EnvRunSeconds, EnvRepeats) and this.
const (
	// guestDirEnv passes the inner test (in its fresh network namespace,
	// whose output is only shown when it ends) the directory where it
	// writes its progress and the section for the outer one to print.
	guestDirEnv = "KPROXY_BENCH_GUEST_DIR"
)

// Lines TestGuestModesSection prints on its stdout for RunGuestSection.
const (
	// GuestSectionPrefix starts the line holding the section as JSON.
	GuestSectionPrefix = "KPROXY-MODES-GUEST-SECTION "
	// GuestProgressPrefix starts a line saying what the guest is doing.
	GuestProgressPrefix = "KPROXY-MODES-GUEST-PROGRESS "
)

// guestSettings are TestGuestModesSection's knobs.
type guestSettings struct {
	Sizes   []int
	RunFor  time.Duration
	Repeats int
}

// guestSettingsFrom reads guestSettings from the environment (getenv),
// as the whole benchmark reads them.
func guestSettingsFrom(getenv func(string) string) (guestSettings, error) {
	c, err := ConfigFromEnv(getenv)
	if err != nil {
		return guestSettings{}, err
	}
	return guestSettings{Sizes: c.GuestSizes, RunFor: c.RunFor(), Repeats: c.Repeats}, nil
}

// GuestOptions says how RunGuestSection runs the guest half.
type GuestOptions struct {
	// GuestExec is bin/guest-exec; TestBinary a test binary of this
	// package (built on the host); KproxyBinary a kproxy built on the host.
	GuestExec, TestBinary, KproxyBinary string
	// Sizes are the service counts (default DefaultConfig's GuestSizes).
	Sizes []int
	// RunSeconds and Repeats shape each workload's runs (default 2 and 2).
	RunSeconds float64
	Repeats    int
	// Progress, if not nil, gets each progress line as the guest prints it.
	Progress func(string)
}

// guestTmpDir is the Makefile's GUEST_TMPDIR default.
const guestTmpDir = "/var/tmp"

// guestOutputTail is how many lines of the guest's output an error keeps.
const guestOutputTail = 60

// RunGuestSection boots the guest kernel with guest-exec, runs
// TestGuestModesSection of opts.TestBinary there and returns the section it
// printed. When the guest run fails after printing a section (a mode
// failed: its cell says why), both the section and the error are returned.
// Errors carry the tail of the guest's output.
func RunGuestSection(ctx context.Context, opts GuestOptions) (Section, error) {
	for name, path := range map[string]string{"guest-exec": opts.GuestExec, "test binary": opts.TestBinary, "kproxy": opts.KproxyBinary} {
		if path == "" {
			return Section{}, fmt.Errorf("guest section: no %s given", name)
		}
		if _, err := os.Stat(path); err != nil {
			return Section{}, fmt.Errorf("guest section: %s: %w", name, err)
		}
	}
	env, timeout, err := guestEnv(opts)
	if err != nil {
		return Section{}, err
	}
	cmd := exec.CommandContext(ctx, opts.GuestExec, opts.TestBinary,
		"-test.run", "^TestGuestModesSection$", "-test.v", "-test.count", "1", "-test.timeout", timeout.String())
	cmd.Env = append(os.Environ(), env...)
	if os.Getenv("TMPDIR") == "" {
		// Guest RAM is a sparse file in $TMPDIR: on disk, as make
		// test-guest keeps it (GUEST_TMPDIR), not in a tmpfs /tmp.
		cmd.Env = append(cmd.Env, "TMPDIR="+guestTmpDir)
	}
	// guest-exec tears the guest down on SIGTERM; SIGKILL would leave the
	// UML processes running.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Section{}, fmt.Errorf("guest section: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return Section{}, fmt.Errorf("guest section: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Section{}, fmt.Errorf("guest section: starting %s: %w", opts.GuestExec, err)
	}
	out := &guestOutput{progress: opts.Progress}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); out.read(stdout) }()
	go func() { defer wg.Done(); out.read(stderr) }()
	wg.Wait()
	runErr := cmd.Wait()
	took := time.Since(start).Round(100 * time.Millisecond)
	section, found, parseErr := out.result()
	switch {
	case parseErr != nil:
		return Section{}, fmt.Errorf("guest section (after %v): %w\nthe guest's output, last lines:\n%s", took, parseErr, out.tail())
	case runErr != nil && found:
		return section, fmt.Errorf("guest section (after %v): the guest run failed (%v) after printing its section\nthe guest's output, last lines:\n%s", took, runErr, out.tail())
	case runErr != nil:
		return Section{}, fmt.Errorf("guest section (after %v): %w\nthe guest's output, last lines:\n%s", took, runErr, out.tail())
	case !found:
		return Section{}, fmt.Errorf("guest section (after %v): the guest printed no %q line\nthe guest's output, last lines:\n%s", took, strings.TrimSpace(GuestSectionPrefix), out.tail())
	}
	return section, nil
}

// guestEnv is the environment TestGuestModesSection gets for opts, and the
// test timeout to give it: generous, as a wedged guest must still end.
func guestEnv(opts GuestOptions) ([]string, time.Duration, error) {
	defaults := DefaultConfig()
	sizes := opts.Sizes
	if len(sizes) == 0 {
		sizes = defaults.GuestSizes
	}
	var list []string
	for _, n := range sizes {
		list = append(list, strconv.Itoa(n))
	}
	if _, err := parseSizeList(EnvGuestSizes, strings.Join(list, ",")); err != nil {
		return nil, 0, fmt.Errorf("guest section sizes %v: %w", sizes, err)
	}
	runSeconds, repeats := opts.RunSeconds, opts.Repeats
	if runSeconds == 0 {
		runSeconds = defaults.RunSeconds
	}
	if repeats == 0 {
		repeats = defaults.Repeats
	}
	if runSeconds < 0 || repeats < 0 {
		return nil, 0, fmt.Errorf("guest section: %v s × %d runs", runSeconds, repeats)
	}
	env := []string{
		lab.KproxyBinaryEnv + "=" + opts.KproxyBinary,
		EnvGuestSizes + "=" + strings.Join(list, ","),
		EnvRunSeconds + "=" + strconv.FormatFloat(runSeconds, 'f', -1, 64),
		EnvRepeats + "=" + strconv.Itoa(repeats),
	}
	// Three modes of four workloads per size, plus set-up and syncs:
	// kube-proxy's first IPVS sync took 106 s at 1,000 services in the
	// guest, kproxy's 11 s.
	data := time.Duration(float64(len(sizes)*3*4*repeats) * runSeconds * float64(time.Second))
	timeout := 10*time.Minute + 2*data
	for _, n := range sizes {
		timeout += time.Duration(n) * 400 * time.Millisecond
	}
	return env, timeout, nil
}

// guestOutput collects what the guest run prints: progress goes to
// progress as it comes, the section line is kept, and so is a tail of
// everything for errors.
type guestOutput struct {
	progress func(string)

	mu      sync.Mutex
	lines   []string
	section string
	found   int
}

func (o *guestOutput) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20) // the section is one long line
	for sc.Scan() {
		o.line(sc.Text())
	}
	if err := sc.Err(); err != nil {
		o.line(fmt.Sprintf("(reading the guest's output: %v)", err))
		_, _ = io.Copy(io.Discard, r) // let the guest finish writing
	}
}

func (o *guestOutput) line(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if rest, ok := strings.CutPrefix(line, GuestSectionPrefix); ok {
		o.section, o.found = rest, o.found+1
		line = GuestSectionPrefix + "(…)"
	} else if rest, ok := strings.CutPrefix(line, GuestProgressPrefix); ok && o.progress != nil {
		o.progress(rest)
	}
	o.lines = append(o.lines, line)
	if len(o.lines) > 2*guestOutputTail {
		o.lines = append(o.lines[:0], o.lines[len(o.lines)-guestOutputTail:]...)
	}
}

// result decodes the section line, if there was one.
func (o *guestOutput) result() (Section, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch o.found {
	case 0:
		return Section{}, false, nil
	case 1:
	default:
		return Section{}, false, fmt.Errorf("the guest printed %d section lines, want one", o.found)
	}
	var s Section
	if err := json.Unmarshal([]byte(o.section), &s); err != nil {
		return Section{}, false, fmt.Errorf("decoding the guest's section: %w", err)
	}
	if s.Name != SectionGuest || s.Reference != ModeDNAT {
		return Section{}, false, fmt.Errorf("the guest's section is %q with reference %q, want %q with %q", s.Name, s.Reference, SectionGuest, ModeDNAT)
	}
	return s, true, nil
}

func (o *guestOutput) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	lines := o.lines[max(0, len(o.lines)-guestOutputTail):]
	if len(lines) == 0 {
		return "    (nothing)"
	}
	return "    " + strings.Join(lines, "\n    ")
}
