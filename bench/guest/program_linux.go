package guest

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// runProgram runs the spec's program with its stdout and stderr on the
// guest ttys the host streams, and returns its exit code (128+n for
// signal n, as shells report it).
//
// As PID 1 the init inherits every orphan in the guest (daemons a test
// left behind), so it reaps all children while it waits: zombies would
// otherwise stay in /proc until power-off. That is why it forks with
// syscall.ForkExec and waits with wait4(-1) instead of using os/exec.
func runProgram(s runSpec) (code int, ttys []int, err error) {
	path, err := programPath(s.Argv[0])
	if err != nil {
		return -1, nil, err
	}
	null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("opening /dev/null: %w", err)
	}
	defer unix.Close(null)
	out, err := openRawOutput(stdoutTTY)
	if err != nil {
		return -1, nil, err
	}
	errOut, err := openRawOutput(stderrTTY)
	if err != nil {
		unix.Close(out)
		return -1, nil, err
	}
	ttys = []int{out, errOut}
	pid, err := syscall.ForkExec(path, s.Argv, &syscall.ProcAttr{
		Dir:   s.Dir,
		Env:   s.Env,
		Files: []uintptr{uintptr(null), uintptr(out), uintptr(errOut)},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return -1, ttys, fmt.Errorf("starting %s in %s: %w", path, s.Dir, err)
	}
	status, err := reapUntil(pid)
	if err != nil {
		return -1, ttys, err
	}
	return exitCode(status), ttys, nil
}

// programPath resolves argv[0] like a shell: as a path when it has a
// slash, else on the init's PATH.
func programPath(argv0 string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	p, err := exec.LookPath(argv0)
	if err != nil {
		return "", fmt.Errorf("finding %s in the guest: %w", argv0, err)
	}
	return p, nil
}

// reapUntil reaps children until pid exits and returns its status.
func reapUntil(pid int) (unix.WaitStatus, error) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, fmt.Errorf("waiting for the program (pid %d): %w", pid, err)
		case got == pid:
			return ws, nil
		}
	}
}

func exitCode(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
