package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// mount is one line of /proc/self/mountinfo: where, and the file system type.
type mount struct {
	point, fsType string
}

// mounts reads the calling process's mount table.
func mounts() ([]mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	var out []mount
	for _, line := range strings.Split(string(data), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mount{point: fields[4], fsType: fields[sep+1]})
	}
	return out, nil
}

// cgroupMounts lists the mount points of every cgroup hierarchy (v1, and
// the v2 one of a hybrid layout).
func cgroupMounts() ([]string, error) {
	all, err := mounts()
	if err != nil {
		return nil, err
	}
	var points []string
	for _, m := range all {
		if m.fsType == "cgroup" || m.fsType == "cgroup2" {
			points = append(points, m.point)
		}
	}
	if len(points) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return points, nil
}

// createCgroup makes rel (slash-separated, relative to each hierarchy's
// root) in every hierarchy. cpuset needs its CPUs and memory nodes set
// before a process can join, so they are copied from the parent.
func createCgroup(rel string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		dir := m
		for _, part := range strings.Split(rel, "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if err := copyIfEmpty(filepath.Join(parent, f), filepath.Join(dir, f)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func copyIfEmpty(from, to string) error {
	cur, err := os.ReadFile(to)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // not the cpuset hierarchy
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", to, err)
	}
	if strings.TrimSpace(string(cur)) != "" {
		return nil
	}
	v, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("reading %s: %w", from, err)
	}
	if err := os.WriteFile(to, v, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", to, err)
	}
	return nil
}

// joinCgroup moves process pid into rel in every hierarchy.
func joinCgroup(rel string, pid int) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		f := filepath.Join(m, rel, "cgroup.procs")
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("joining %s: %w", f, err)
		}
	}
	return nil
}

// cgroupProcs lists the processes in rel and below, in any hierarchy.
func cgroupProcs(rel string) ([]int, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, m := range mounts {
		err := filepath.WalkDir(filepath.Join(m, rel), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			for _, line := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(line); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing processes of cgroup %s: %w", rel, err)
		}
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids, nil
}

// removeCgroup removes rel and every cgroup below it, deepest first, in
// every hierarchy. The cgroups must hold no process.
func removeCgroup(rel string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		var dirs []string
		err := filepath.WalkDir(filepath.Join(m, rel), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Walk order is parents first: remove in reverse.
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}
