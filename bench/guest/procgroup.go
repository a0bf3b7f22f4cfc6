package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// UML runs the guest as a tree of host processes (the kernel, one process
// per guest address space, helper threads). It is started as the leader of
// its own process group so the whole tree can be killed at once.

// killGroup sends SIGKILL to every process in group pgid and waits until
// none is left (their parent may still have to reap them, but they no
// longer run). A group already gone is not an error.
func killGroup(pgid int, wait time.Duration) error {
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing UML process group %d: %w", pgid, err)
	}
	deadline := time.Now().Add(wait)
	for {
		left := groupMembers(pgid)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("UML processes %v still running %v after SIGKILL", left, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// groupMembers lists the live (not zombie) processes of process group pgid.
func groupMembers(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		state, group, ok := statStateAndGroup(string(data))
		if ok && group == pgid && state != "Z" && state != "X" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// statStateAndGroup reads the state and process group from /proc/<pid>/stat:
// "pid (comm) state ppid pgrp ...", where comm may hold spaces and ')'.
func statStateAndGroup(stat string) (state string, pgrp int, ok bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", 0, false
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 3 {
		return "", 0, false
	}
	pgrp, err := strconv.Atoi(fields[2])
	if err != nil {
		return "", 0, false
	}
	return fields[0], pgrp, true
}

// umlProcAttr starts UML as the leader of its own process group, so the
// whole tree can be killed at once, with SIGKILL as its parent-death
// signal, so no guest outlives its runner. UML's child processes do not
// die with it, though: as root UML also gets a PID namespace of its own,
// whose other processes the kernel kills when UML (its init) dies, even
// when the runner was SIGKILLed and could not kill the group itself.
func umlProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		attr.Cloneflags = syscall.CLONE_NEWPID
	}
	return attr
}
