// Command guest-exec runs a program, normally a Go test binary, inside the
// user-mode-linux guest kernel (IPVS, SCTP, legacy iptables), streaming its
// output and exiting with its exit code:
//
//	go test -exec "$PWD/bin/guest-exec" ./lb/sctprelay/ -run Guest
//	go test -exec "$PWD/bin/guest-exec -modules ip_vs_lc -timeout 5m" ./redirect/modes/ipvs/
//	go test -exec "$PWD/bin/guest-exec -netfilter=false" ./bench/guest/ -run Guest
//
// The same binary is the guest's init; see package kproxy.dev/kproxy/bench/guest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"kproxy.dev/kproxy/bench/guest"
)

// envModules adds modules to every run, like -modules.
const envModules = "KPROXY_GUEST_MODULES"

func main() {
	if guest.RunningAsInit() {
		guest.RunInit() // never returns
	}
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("guest-exec", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: guest-exec [flags] program [args...]\n"+
			"Runs program in the user-mode-linux guest kernel and exits with its exit code.\n")
		fs.PrintDefaults()
	}
	timeout := fs.Duration("timeout", 0, "kill the guest after this long (0: the program's -test.timeout plus a minute, else 11m)")
	modules := fs.String("modules", "", "kernel modules to load besides the default set (comma-separated); also $"+envModules)
	netfilter := fs.Bool("netfilter", true, "load netfilter modules; false boots a guest with none, module loading disabled, "+
		"like a node without netfilter (also $"+guest.EnvNetfilter+"=off)")
	mem := fs.String("mem", guest.DefaultMem, "guest RAM (a file in $TMPDIR)")
	kernel := fs.String("kernel", "", "UML kernel binary (default: linux.uml)")
	keep := fs.Bool("keep", false, "keep the per-run directory (console.log, uml.log) for debugging")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fs.Usage()
		return 2
	}
	extra, err := guest.ParseModules(*modules + "," + os.Getenv(envModules))
	if err != nil {
		fmt.Fprintf(os.Stderr, "guest-exec: %v\n", err)
		return 2
	}
	envNetfilter, err := guest.ParseNetfilter(os.Getenv(guest.EnvNetfilter))
	if err != nil {
		fmt.Fprintf(os.Stderr, "guest-exec: %v\n", err)
		return 2
	}
	if *timeout <= 0 {
		*timeout = guest.TimeoutFor(argv[1:])
	}

	// A closed stdout must end the run through Run's error handling (which
	// kills the guest), not kill this process and orphan the guest.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("timed out after %v", *timeout))
	defer cancel()

	cfg := guest.Config{Kernel: *kernel, Modules: extra, NoNetfilter: !*netfilter || !envNetfilter, Mem: *mem, KeepRunDir: *keep, Stdout: os.Stdout, Stderr: os.Stderr}
	if *keep {
		// A directory of its own, so the kept run is easy to find.
		if cfg.TempDir, err = os.MkdirTemp("", "guest-exec-keep-"); err != nil {
			fmt.Fprintf(os.Stderr, "guest-exec: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "guest-exec: keeping the guest's run directory under %s\n", cfg.TempDir)
	}
	start := time.Now()
	code, err := guest.Run(ctx, cfg, argv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "guest-exec: running %s in the guest kernel (after %v): %v\n", argv[0], time.Since(start).Round(time.Millisecond), err)
		return 1
	}
	return code
}
