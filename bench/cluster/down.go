package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Down removes every trace of a cluster: its processes (by cgroup), mounts,
// network namespaces, cgroups, the paths and kernel settings Up recorded,
// and the state directory. It also cleans up after a failed or interrupted
// Up, and does nothing when no cluster is there.
func Down(stateDir string, out io.Writer) error {
	if err := killAll(out); err != nil {
		return err
	}
	var errs []error
	if err := unmountUnder(stateDir, "/run/containerd"); err != nil {
		errs = append(errs, err)
	}
	if err := removeNetwork(); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroup(cgroupRoot); err != nil {
		errs = append(errs, err)
	}
	if err := restoreHost(stateDir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the cluster (the state directory %s stays): %w", stateDir, err)
	}
	if err := os.RemoveAll(stateDir); err != nil {
		return fmt.Errorf("removing %s: %w", stateDir, err)
	}
	fmt.Fprintln(out, "cluster: removed")
	return nil
}

// killAll kills every process in the cluster's cgroups until none is left.
func killAll(out io.Writer) error {
	deadline := time.Now().Add(30 * time.Second)
	killed := 0
	for {
		pids, err := cgroupProcs(cgroupRoot)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			if killed > 0 {
				fmt.Fprintf(out, "cluster: stopped %d processes\n", killed)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of the cluster's cgroup %s do not die", pids, cgroupRoot)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unmountUnder detaches every mount below the given directories, deepest
// first, until none is left (a shared mount may reappear once).
func unmountUnder(dirs ...string) error {
	for range 5 {
		mounts, err := mountsUnder(dirs)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unmounting %s: %w", m, err)
			}
		}
	}
	mounts, err := mountsUnder(dirs)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("mounts stay: %v", mounts)
	}
	return nil
}

// mountsUnder lists the mount points at or below dirs, deepest first.
func mountsUnder(dirs []string) ([]string, error) {
	all, err := mounts()
	if err != nil {
		return nil, err
	}
	var points []string
	for _, m := range all {
		for _, d := range dirs {
			if m.point == d || strings.HasPrefix(m.point, d+"/") {
				points = append(points, m.point)
				break
			}
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(points), nil
}
