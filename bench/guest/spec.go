package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The host and the guest init talk through files in the shared directory
// (the only host directory the guest mounts read-write), never through
// kernel arguments, which are split on spaces and length-limited.
const (
	specFile      = "run.json"  // host → guest: what to run
	exitCodeFile  = "exit-code" // guest → host: the program's exit status
	initErrorFile = "init-error"
)

// runSpec is what the guest init runs: a program, its arguments, its
// environment and working directory, after loading Modules. NoNetfilter
// has the init then disable module loading and check that no netfilter
// module is loaded.
type runSpec struct {
	Argv        []string `json:"argv"`
	Env         []string `json:"env"`
	Dir         string   `json:"dir"`
	Modules     []string `json:"modules"`
	NoNetfilter bool     `json:"noNetfilter,omitempty"`
}

func writeSpec(sharedDir string, s runSpec) error {
	if len(s.Argv) == 0 {
		return errors.New("guest run: no program to run")
	}
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding the guest run spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(sharedDir, specFile), data, 0o600); err != nil {
		return fmt.Errorf("writing the guest run spec: %w", err)
	}
	return nil
}

func readSpec(sharedDir string) (runSpec, error) {
	var s runSpec
	data, err := os.ReadFile(filepath.Join(sharedDir, specFile))
	if err != nil {
		return s, fmt.Errorf("reading the run spec: %w", err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("decoding the run spec %s: %w", specFile, err)
	}
	if len(s.Argv) == 0 {
		return s, errors.New("the run spec names no program")
	}
	return s, nil
}

// guestEnv is the environment the program gets in the guest: the host's,
// marked with EnvInGuest and saying by EnvNetfilter whether the guest has
// netfilter (whatever the host's said).
func guestEnv(hostEnv []string, noNetfilter bool) []string {
	env := make([]string, 0, len(hostEnv)+2)
	for _, kv := range hostEnv {
		if !strings.HasPrefix(kv, EnvInGuest+"=") && !strings.HasPrefix(kv, EnvNetfilter+"=") {
			env = append(env, kv)
		}
	}
	netfilter := "on"
	if noNetfilter {
		netfilter = "off"
	}
	return append(env, EnvInGuest+"=1", EnvNetfilter+"="+netfilter)
}

// writeResult records the exit code, or, when the program never ran, why.
func writeResult(sharedDir string, code int, initErr error) error {
	name, content := exitCodeFile, strconv.Itoa(code)
	if initErr != nil {
		name, content = initErrorFile, initErr.Error()
	}
	f, err := os.Create(filepath.Join(sharedDir, name))
	if err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	if _, err := f.WriteString(content + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	// The guest powers off right after: the data must reach the host file.
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", name, err)
	}
	return f.Close()
}

// resultReported says whether the guest has written its result whole
// (writeResult ends it with a newline), so the host may stop waiting for it.
func resultReported(sharedDir string) bool {
	for _, name := range []string{exitCodeFile, initErrorFile} {
		if data, err := os.ReadFile(filepath.Join(sharedDir, name)); err == nil && strings.HasSuffix(string(data), "\n") {
			return true
		}
	}
	return false
}

// readResult returns the program's exit code, or an error saying why the
// guest did not report one.
func readResult(sharedDir string) (int, error) {
	if msg, err := os.ReadFile(filepath.Join(sharedDir, initErrorFile)); err == nil {
		return 0, fmt.Errorf("guest init failed: %s", strings.TrimSpace(string(msg)))
	}
	data, err := os.ReadFile(filepath.Join(sharedDir, exitCodeFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, errors.New("the guest reported no exit code (its init or kernel died before the program finished)")
	}
	if err != nil {
		return 0, fmt.Errorf("reading the guest's exit code: %w", err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("the guest's exit code %q: %w", strings.TrimSpace(string(data)), err)
	}
	return code, nil
}
