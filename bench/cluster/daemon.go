package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// daemon is a long-running process of the cluster.
type daemon struct {
	name     string // its log is logs/NAME.log
	netns    string // ip netns name; "" for the host's
	hostname string // a UTS namespace with this hostname; "" to share the host's
	cgroup   string
	argv     []string // argv[0] is a path
}

// start starts d detached (its own session, output to its log), through
// kcluster run-in, which puts it in its cgroup and namespaces first: it
// outlives Up, and Down finds it by its cgroup.
func (c *cluster) start(d daemon) error {
	args := []string{"run-in", "-cgroup", d.cgroup}
	if d.netns != "" {
		args = append(args, "-netns", NetnsPath(d.netns))
	}
	if d.hostname != "" {
		args = append(args, "-hostname", d.hostname)
	}
	args = append(append(args, "--"), d.argv...)
	log, err := os.OpenFile(c.paths.logs(d.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening the log of %s: %w", d.name, err)
	}
	defer log.Close()
	cmd := exec.Command(c.cfg.Self, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.name, err)
	}
	return cmd.Process.Release()
}

// RunIn replaces the calling process with argv after moving it into the
// cgroup (relative to each hierarchy's root), the network namespace at
// netnsPath (if not "") and a new UTS namespace named hostname (if not ""):
// kcluster run-in.
func RunIn(cgroup, netnsPath, hostname string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("no program to run")
	}
	if cgroup == "" {
		return fmt.Errorf("no cgroup given: the cluster's processes are found by theirs")
	}
	if err := joinCgroup(cgroup, os.Getpid()); err != nil {
		return err
	}
	// Namespaces are per thread until execve, which keeps the calling
	// thread's.
	runtime.LockOSThread()
	if netnsPath != "" {
		f, err := os.Open(netnsPath)
		if err != nil {
			return fmt.Errorf("opening network namespace: %w", err)
		}
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering %s: %w", netnsPath, err)
		}
	}
	if hostname != "" {
		if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
			return fmt.Errorf("new UTS namespace: %w", err)
		}
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("setting the hostname %s: %w", hostname, err)
		}
	}
	if err := syscall.Exec(argv[0], argv, os.Environ()); err != nil {
		return fmt.Errorf("executing %s: %w", argv[0], err)
	}
	return nil
}

// WaitFor polls check until it returns nil, giving up after timeout with
// its last error.
func WaitFor(ctx context.Context, timeout time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not after %v: %w", what, timeout, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
