package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// This test binary plays every part of a guest run: the host side (the
// tests), the guest's init (RunInit, when booted as PID 1) and the program
// the guest runs (a helper mode chosen by helperEnv).
func TestMain(m *testing.M) {
	if RunningAsInit() {
		RunInit()
	}
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

const (
	helperEnv     = "KPROXY_GUEST_TEST_HELPER" // the helper mode
	helperExitEnv = "KPROXY_GUEST_TEST_EXIT"   // the report helper's exit code
	// runnerTempDirEnv is the TempDir of the "runner" helper's guest run.
	runnerTempDirEnv = "KPROXY_GUEST_TEST_RUNNER_TMP"
	// helperFile is written by the report helper into its working
	// directory, a host directory it must not be able to change.
	helperFile = "written-in-the-guest"
)

// helperReport is what the "report" helper prints on stdout.
type helperReport struct {
	Args     []string
	Dir      string
	Hostname string
	InGuest  bool
	ExitEnv  string
	WroteCwd string // "" or the error writing helperFile
	// WithoutNetfilter and ModulesDisabled (kernel.modules_disabled) tell
	// a guest without netfilter from another.
	WithoutNetfilter bool
	ModulesDisabled  string
}

func helperMain(mode string) int {
	switch mode {
	case "report":
		r := helperReport{Args: os.Args[1:], InGuest: InGuest(), ExitEnv: os.Getenv(helperExitEnv)}
		r.Dir, _ = os.Getwd()
		r.Hostname, _ = os.Hostname()
		r.WithoutNetfilter = WithoutNetfilter()
		disabled, _ := os.ReadFile("/proc/sys/kernel/modules_disabled")
		r.ModulesDisabled = strings.TrimSpace(string(disabled))
		if err := os.WriteFile(helperFile, []byte("guest"), 0o600); err != nil {
			r.WroteCwd = err.Error()
		}
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			return 100
		}
		fmt.Fprint(os.Stderr, "to stderr\n")
		var code int
		fmt.Sscan(r.ExitEnv, &code)
		return code
	case "kill-self":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return 101
	case "runner": // on the host: runs Run with the "hang" helper as its program
		self, _ := os.Executable()
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, helperEnv+"=") {
				env = append(env, kv)
			}
		}
		env = append(env, helperEnv+"=hang")
		code, err := Run(context.Background(), Config{TempDir: os.Getenv(runnerTempDirEnv), Env: env, Stdout: os.Stdout, Stderr: os.Stderr}, []string{self})
		fmt.Fprintln(os.Stderr, code, err)
		return 104
	case "hang": // says it is ready, then keeps writing until killed
		fmt.Println("ready")
		for {
			time.Sleep(100 * time.Millisecond)
			fmt.Println("running")
		}
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 103
}
