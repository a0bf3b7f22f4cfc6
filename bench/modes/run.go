package modes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	"kproxy.dev/kproxy/bench/lab"
)

// The run's process tree: the benchmark (the parent, in the host's
// namespace) runs each size as a sub-test or sub-benchmark that
// re-executes the test binary in a fresh network namespace
// (lab.InFreshNetns); that process measures the size and leaves its cells
// in the directory envCellsDir names, with the progress state it started
// from in envStarted and envDone.
const (
	envCellsDir = "KPROXY_BENCH_CELLS_DIR"
	envStarted  = "KPROXY_BENCH_STARTED"
	envDone     = "KPROXY_BENCH_DONE"
	// EnvGuestExec names bin/guest-exec; without it the run builds one.
	EnvGuestExec = "KPROXY_GUEST_EXEC"
)

// RunAll runs the benchmark under tb (a *testing.T or *testing.B) and,
// in the parent process, returns the results with ok true; in a size's
// process it measures that size and returns ok false. A size or mode that
// fails is reported through tb; what was measured is still returned.
func RunAll(tb testing.TB, cfg Config, command string) (run Run, ok bool) {
	cellsDir := os.Getenv(envCellsDir)
	inner := cellsDir != ""
	plan := newPlan(cfg)
	progress := &Progress{Out: os.Stderr, Started: time.Now(), Total: plan.Total()}
	if inner {
		if ns, err := strconv.ParseInt(os.Getenv(envStarted), 10, 64); err == nil {
			progress.Started = time.Unix(0, ns)
		}
		if d, err := time.ParseDuration(os.Getenv(envDone)); err == nil {
			progress.Done = d
		}
	} else {
		lab.RequireRoot(tb)
		cellsDir = tb.TempDir()
		progress.Printf("starting: sizes %v, %d host modes, guest %v; estimated %v in all", cfg.Sizes, len(cfg.Modes), cfg.Guest, plan.Total().Round(time.Minute))
	}
	bins := Binaries{Kproxy: lab.KproxyBinary(tb), KubeProxy: lab.KubeProxyBinary(tb)}
	run = Run{Version: SchemaVersion, Started: progress.Started, Command: command, Settings: cfg.Settings, Commit: commit(),
		Machine: machine(bins.KubeProxy)}

	for _, size := range cfg.Sizes {
		subRun(tb, fmt.Sprintf("size-%d", size), func(tb testing.TB) {
			env := []string{lab.KproxyBinaryEnv + "=" + bins.Kproxy, envCellsDir + "=" + cellsDir,
				envStarted + "=" + strconv.FormatInt(progress.Started.UnixNano(), 10), envDone + "=" + progress.Done.String()}
			if lab.InFreshNetns(tb, env...) {
				return
			}
			cells := MeasureSize(tb, cfg, size, bins, progress)
			if err := writeCells(cellsDir, size, cells); err != nil {
				tb.Fatal(err)
			}
		})
		if !inner {
			// A size's process counts its own steps; the loop also passes
			// the sizes that are not its own.
			progress.Step(plan.SizeCost(size))
		}
	}
	if inner {
		return Run{}, false
	}

	host := Section{Name: SectionHost, Reference: ModeDNAT,
		Title: "Host kernel: every mode it runs, rates as ratios to a hand-written DNAT rule at the same size"}
	for _, size := range cfg.Sizes {
		cells, err := readCells(cellsDir, size)
		if err != nil {
			tb.Errorf("%d services: no results (that size failed; see above): %v", size, err)
			continue
		}
		host.Cells = append(host.Cells, cells...)
	}
	host.Notes = hostNotes(cfg)
	run.Sections = append(run.Sections, host)

	if cfg.Guest {
		progress.Printf("the guest section (IPVS, user-mode-linux): sizes %v", cfg.GuestSizes)
		guest, err := runGuest(tb, cfg, bins, progress)
		if err != nil {
			tb.Errorf("the guest section: %v", err)
		} else {
			run.Sections = append(run.Sections, guest)
		}
	}
	run.TookSeconds = time.Since(progress.Started).Seconds()
	run.Machine.LoadAfter = benchtable.LoadAverage()
	return run, true
}

// runGuest runs the guest section with bin/guest-exec (built if
// EnvGuestExec does not name one).
func runGuest(tb testing.TB, cfg Config, bins Binaries, progress *Progress) (Section, error) {
	guestExec := os.Getenv(EnvGuestExec)
	if guestExec == "" {
		guestExec = filepath.Join(tb.TempDir(), "guest-exec")
		cmd := exec.Command("go", "build", "-o", guestExec, "kproxy.dev/kproxy/bench/guest/cmd/guest-exec")
		if out, err := cmd.CombinedOutput(); err != nil {
			return Section{}, fmt.Errorf("building guest-exec: %w\n%s", err, out)
		}
	}
	return RunGuestSection(context.Background(), GuestOptions{
		GuestExec: guestExec, TestBinary: os.Args[0], KproxyBinary: bins.Kproxy,
		Sizes: cfg.GuestSizes, RunSeconds: cfg.RunSeconds, Repeats: cfg.Repeats,
		Progress: func(line string) { progress.Printf("guest: %s", line) },
	})
}

// subRun runs f as a sub-test or sub-benchmark of tb.
func subRun(tb testing.TB, name string, f func(testing.TB)) {
	switch t := tb.(type) {
	case *testing.T:
		t.Run(name, func(t *testing.T) { f(t) })
	case *testing.B:
		t.Run(name, func(b *testing.B) { f(b) })
	default:
		tb.Fatalf("cannot run %s under %T", name, tb)
	}
}

// hostNotes say how the host section was measured.
func hostNotes(cfg Config) []string {
	return []string{
		fmt.Sprintf("Each size is a fresh network namespace with a real kube-apiserver holding that many services "+
			"(one TCP port, %d endpoints that exist nowhere, as in bench-syncscale) plus the measured service "+
			"(HTTP and UDP, %d real endpoints on one backend host). The reference is hand-written nat PREROUTING DNAT "+
			"rules taking those endpoints in turn, measured before and after the modes of a size, its runs pooled.", endpointsPerService, cfg.Endpoints),
		"First full sync: process start until the sync counter reaches 1; CPU (the proxy's and its iptables-restore/nft " +
			"children's) and RSS then. One change: an endpoint added to a service in the middle, from the API update " +
			"until the kernel holds it (iptables -S / nf_tables over netlink); in the userspace mode until the sync " +
			"holding it has returned (the relays' balancer, not the kernel, holds endpoints). New service: create " +
			"until a client gets an answer through its ClusterIP (median).",
		fmt.Sprintf("Data plane through the measured service: wrk (2 threads, 32 connections) keep-alive and "+
			"Connection: close, a UDP request/response client (16 flows, 64 bytes), new UDP flows (a fresh source "+
			"port each); %d runs of %.1f s each, medians; CPU per request is the whole machine's busy time (client, "+
			"proxy, server, kernel) over requests answered.", cfg.Repeats, cfg.RunSeconds),
		"kube-proxy v1.36.3's iptables mode runs iptables-nft (the default on Debian 12). The userspace mode needs " +
			"descriptors per service port; sizes whose relays exceed RLIMIT_NOFILE are skipped, saying so.",
	}
}

// commit is the kproxy revision the run measured, from git.
func commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// machine describes this machine.
func machine(kubeProxyBin string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadBefore: benchtable.LoadAverage(),
		Kernel: benchtable.KernelRelease(), CPUModel: benchtable.CPUModel()}
	if out, err := exec.Command(kubeProxyBin, "--version").Output(); err == nil {
		m.KubeProxy = strings.TrimSpace(string(out))
	}
	return m
}
