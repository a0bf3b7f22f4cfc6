package syncscale

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// ReadRSS returns a process's VmRSS and VmHWM (its peak), in bytes.
func ReadRSS(pid int) (rss, peak int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the memory of pid %d: %w", pid, err)
	}
	return ParseRSS(string(data))
}

// ParseRSS reads VmRSS and VmHWM (kB) from /proc/PID/status text.
func ParseRSS(status string) (rss, peak int64, err error) {
	found := 0
	for line := range strings.Lines(status) {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("unexpected %s line %q", key, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("unexpected %s line %q: %w", key, strings.TrimSpace(line), err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("no VmRSS and VmHWM lines in the process status")
	}
	return rss, peak, nil
}

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on
// every Linux architecture this runs on).
const clockTick = 10 * time.Millisecond

// CPUTimes are a process's CPU times: its own, and those of its children
// it has waited for (a proxy's iptables-restore or nft runs).
type CPUTimes struct {
	Self, Children time.Duration
}

// ReadCPU reads a process's CPU times from /proc/PID/stat.
func ReadCPU(pid int) (CPUTimes, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return CPUTimes{}, fmt.Errorf("reading the CPU times of pid %d: %w", pid, err)
	}
	return ParseCPU(string(data))
}

// ParseCPU reads utime, stime, cutime and cstime from /proc/PID/stat text
// (fields 14-17; comm, field 2, may hold spaces).
func ParseCPU(stat string) (CPUTimes, error) {
	closing := strings.LastIndexByte(stat, ')')
	if closing < 0 {
		return CPUTimes{}, errors.New("no command in the process stat")
	}
	f := strings.Fields(stat[closing+1:])
	// f[0] is field 3 (state): utime is field 14, f[11].
	if len(f) < 15 {
		return CPUTimes{}, fmt.Errorf("the process stat has %d fields after the command, want at least 15", len(f))
	}
	var ticks [4]int64
	for i := range ticks {
		v, err := strconv.ParseInt(f[11+i], 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("process stat field %d: %w", 14+i, err)
		}
		ticks[i] = v
	}
	return CPUTimes{
		Self:     time.Duration(ticks[0]+ticks[1]) * clockTick,
		Children: time.Duration(ticks[2]+ticks[3]) * clockTick,
	}, nil
}

// proxyCommands are the programs a proxy runs (by comm, which the kernel
// cuts to 15 characters: "iptables-nft-re…"): what may be left behind in
// the row's namespace when a proxy is stopped in the middle of a sync.
var proxyCommands = []string{"iptables", "ip6tables", "xtables", "nft", "kube-proxy", "kproxy"}

// StopGroup stops a proxy and every process of its process group (lab
// processes lead their own group), whether or not the proxy itself is
// still running: a proxy that exited or was stopped mid-sync can leave an
// iptables-restore or nft child behind, which would write into the next
// proxy's measurement. It then kills any proxy tool still running in this
// namespace (one that left the group), reporting each through logf.
func StopGroup(proc *lab.Process, logf func(string, ...any)) error {
	pgid := proc.Pid()
	stopErr := proc.Stop()
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing process group %d of %s: %w", pgid, proc, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processes(func(p procInfo) bool { return p.pgid == pgid })
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d of %s still holds %v after SIGKILL", pgid, proc, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	netns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return fmt.Errorf("reading this process's network namespace: %w", err)
	}
	self := os.Getpid()
	strays := processes(func(p procInfo) bool {
		if p.pid == self || !isProxyCommand(p.comm) {
			return false
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p.pid))
		return err == nil && ns == netns
	})
	for _, p := range strays {
		logf("killing %s (pid %d, group %d), left running in the row's namespace after %s stopped", p.comm, p.pid, p.pgid, proc)
		if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing %s (pid %d): %w", p.comm, p.pid, err)
		}
	}
	for _, p := range strays {
		for running(p.pid) {
			if time.Now().After(deadline.Add(5 * time.Second)) {
				return fmt.Errorf("%s still runs after SIGKILL", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return stopErr
}

// running says whether pid is alive (a zombie is not).
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, state, ok := parseStat(string(data))
	return ok && state != "Z"
}

func isProxyCommand(comm string) bool {
	for _, c := range proxyCommands {
		if strings.HasPrefix(comm, c) {
			return true
		}
	}
	return false
}

type procInfo struct {
	pid, pgid int
	comm      string
}

func (p procInfo) String() string { return fmt.Sprintf("%s (pid %d)", p.comm, p.pid) }

// processes lists the running processes that match keep (zombies, already
// dead, are left out).
func processes(keep func(procInfo) bool) []procInfo {
	entries, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []procInfo
	for _, e := range entries {
		data, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		p, state, ok := parseStat(string(data))
		if ok && state != "Z" && keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// parseStat reads pid, comm, state and pgrp from /proc/PID/stat ("pid
// (comm) state ppid pgrp …"; comm may hold spaces and parentheses).
func parseStat(s string) (procInfo, string, bool) {
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procInfo{}, "", false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	f := strings.Fields(s[closing+1:])
	if err != nil || len(f) < 3 {
		return procInfo{}, "", false
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return procInfo{}, "", false
	}
	return procInfo{pid: pid, pgid: pgid, comm: s[open+1 : closing]}, f[0], true
}
