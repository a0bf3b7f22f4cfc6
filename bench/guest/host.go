package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// DefaultMem is the guest's RAM. UML backs it with a file in TMPDIR that
// fills only as the guest touches it.
const DefaultMem = "512M"

// killWait bounds how long Run waits for the UML processes to die after
// SIGKILL before reporting them as stray.
const killWait = 10 * time.Second

// Config says how to boot the guest. The zero value boots the installed
// user-mode-linux kernel with this executable as init and DefaultModules.
type Config struct {
	// Kernel is the UML kernel binary; "" looks for linux.uml.
	Kernel string
	// Init is the binary the guest runs as PID 1; it must call RunInit
	// when RunningAsInit says so. "" means this executable.
	Init string
	// Modules are loaded in addition to DefaultModules.
	Modules []string
	// NoNetfilter boots a guest without netfilter, like a node whose
	// kernel lacks it: DefaultModules' netfilter ones are left out (Modules
	// must name none), module loading is disabled once the others are in,
	// and the boot fails unless iptables then cannot use the nat table.
	NoNetfilter bool
	// Mem is the guest's RAM, e.g. "512M"; "" means DefaultMem.
	Mem string
	// TempDir holds the per-run directory (UML sockets, the shared
	// directory, and guest RAM when /dev/shm has no room for it; see
	// memDir); "" means os.TempDir().
	TempDir string
	// Dir is the program's working directory in the guest; "" means the
	// current directory (go test runs a test binary in its package).
	Dir string
	// Env is the program's environment, before EnvInGuest is added; nil
	// means os.Environ().
	Env []string
	// Stdout and Stderr receive the program's output as it runs; nil
	// discards it.
	Stdout, Stderr io.Writer
	// KeepRunDir leaves the per-run directory (console.log, uml.log, the
	// shared files) in place for debugging; Run names it in its error.
	KeepRunDir bool

	// haltGrace replaces defaultHaltGrace (tests).
	haltGrace time.Duration
}

// Run boots the guest, runs argv[0] with argv[1:] there and returns its
// exit code (128+n when signal n killed it). The error is for the guest
// itself failing: UML missing, the boot or init failing, or ctx ending
// first, in which case every UML process has been killed. Run never leaves
// UML processes behind and removes its per-run directory.
func Run(ctx context.Context, cfg Config, argv []string) (code int, err error) {
	if len(argv) == 0 {
		return -1, errors.New("guest run: no program given")
	}
	kernel, err := findKernel(cfg.Kernel, packagedKernel)
	if err != nil {
		return -1, err
	}
	if err := checkGuestTools(); err != nil {
		return -1, err
	}
	cfg, err = withDefaults(cfg)
	if err != nil {
		return -1, err
	}
	runDir, err := os.MkdirTemp(cfg.TempDir, "kproxy-guest-")
	if err != nil {
		return -1, fmt.Errorf("creating the guest's run directory: %w", err)
	}
	defer func() {
		if cfg.KeepRunDir {
			err = annotate(err, "run directory kept: "+runDir)
			return
		}
		if rmErr := os.RemoveAll(runDir); rmErr != nil && err == nil {
			err = fmt.Errorf("removing the guest's run directory: %w", rmErr)
		}
	}()
	paths := bootPaths{Init: cfg.Init, SharedDir: filepath.Join(runDir, "shared"), UMLDir: runDir}
	args, err := kernelArgs(paths, cfg.Mem)
	if err != nil {
		return -1, err
	}
	if err := os.Mkdir(paths.SharedDir, 0o700); err != nil {
		return -1, fmt.Errorf("creating the guest's shared directory: %w", err)
	}
	mods, err := guestModules(cfg.Modules, cfg.NoNetfilter)
	if err != nil {
		return -1, err
	}
	spec := runSpec{Argv: argv, Env: guestEnv(cfg.Env, cfg.NoNetfilter), Dir: cfg.Dir, Modules: mods, NoNetfilter: cfg.NoNetfilter}
	if err := writeSpec(paths.SharedDir, spec); err != nil {
		return -1, err
	}
	reported := func() bool { return resultReported(paths.SharedDir) }
	if err := boot(ctx, kernel, args, runDir, memDir(runDir, cfg.Mem), cfg.Stdout, cfg.Stderr, reported, cfg.haltGrace); err != nil {
		return -1, withLogs(err, runDir)
	}
	code, err = readResult(paths.SharedDir)
	if err != nil {
		return -1, withLogs(err, runDir)
	}
	return code, nil
}

func withDefaults(cfg Config) (Config, error) {
	var err error
	if cfg.Init == "" {
		if cfg.Init, err = os.Executable(); err != nil {
			return cfg, fmt.Errorf("finding this executable to run as guest init: %w", err)
		}
	}
	if cfg.Init, err = filepath.Abs(cfg.Init); err != nil {
		return cfg, fmt.Errorf("guest init %s: %w", cfg.Init, err)
	}
	if cfg.Mem == "" {
		cfg.Mem = DefaultMem
	}
	if cfg.haltGrace == 0 {
		cfg.haltGrace = defaultHaltGrace
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.Getwd(); err != nil {
			return cfg, fmt.Errorf("guest run: working directory: %w", err)
		}
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	return cfg, nil
}

func annotate(err error, note string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w (%s)", err, note)
}
