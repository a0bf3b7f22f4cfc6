package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

const (
	// defaultHaltGrace is how long UML gets to exit once the guest has
	// reported its result. Rarely, UML 6.1 prints "reboot: System halted"
	// and then spins at full CPU instead of exiting (seen once in CI, which
	// then hung until the test binary's timeout); the result is already on
	// the host by then, so UML is killed and the run ends normally.
	defaultHaltGrace = 10 * time.Second
	// resultPollInterval is how often the host looks for the result.
	resultPollInterval = 200 * time.Millisecond
)

// boot runs UML, its RAM in a file in memDir, until it powers off (or ctx ends, or it outstays haltGrace
// after reported says the guest's result is in), streaming the guest's two
// program consoles to stdout and stderr.
func boot(ctx context.Context, kernel string, args []string, runDir, memDir string, stdout, stderr io.Writer,
	reported func() bool, haltGrace time.Duration) error {
	console, err := os.Create(filepath.Join(runDir, "console.log"))
	if err != nil {
		return fmt.Errorf("creating the guest console log: %w", err)
	}
	defer console.Close()
	umlLog, err := os.Create(filepath.Join(runDir, "uml.log"))
	if err != nil {
		return fmt.Errorf("creating the UML log: %w", err)
	}
	defer umlLog.Close()
	// A reader of the output that went away (go test killed, a closed
	// pipe) ends the run: nobody would see the result.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	readerGone := func(err error) { cancel(fmt.Errorf("writing the program's output: %w", err)) }
	var copies sync.WaitGroup
	outW, err := streamTo(stdout, &copies, readerGone)
	if err != nil {
		return err
	}
	errW, err := streamTo(stderr, &copies, readerGone)
	if err != nil {
		outW.Close()
		return err
	}

	cmd := exec.Command(kernel, args...)
	// Guest RAM is a file UML makes in TMPDIR (see memDir).
	cmd.Env = append(os.Environ(), "TMPDIR="+memDir)
	cmd.Stdout, cmd.Stderr = umlLog, umlLog
	cmd.ExtraFiles = []*os.File{console, outW, errW} // fds 3, 4, 5: see consoleFD
	cmd.SysProcAttr = umlProcAttr()
	startErr := startAtNormalPriority(cmd)
	// UML holds its own copies now; the copiers see EOF once UML is gone.
	outW.Close()
	errW.Close()
	if startErr != nil {
		copies.Wait()
		return fmt.Errorf("starting the UML kernel %s: %w", kernel, startErr)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var runErr error
	poll := time.NewTicker(resultPollInterval)
	defer poll.Stop()
	var halting <-chan time.Time
wait:
	for {
		select {
		case <-ctx.Done():
			runErr = fmt.Errorf("guest run stopped (%w): UML killed", context.Cause(ctx))
			break wait
		case <-exited:
			exited = nil
			break wait
		case <-poll.C:
			if halting == nil && reported() {
				halting = time.After(haltGrace)
			}
		case <-halting:
			fmt.Fprintf(umlLog, "kproxy guest host: UML still running %v after the guest reported its result; killed\n", haltGrace)
			break wait
		}
	}
	// Also after a normal power-off: nothing of the tree may outlive Run.
	if err := killGroup(cmd.Process.Pid, killWait); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if exited != nil {
		<-exited
	}
	copies.Wait()
	return runErr
}

// streamTo returns the write end of a pipe whose data is copied to w (or
// dropped when w is nil) until every write end is closed. UML needs a
// descriptor, and a pipe keeps UML from touching a terminal's settings.
// When writing to w fails, failed is called and the rest is drained, so
// UML never blocks on a full pipe.
func streamTo(w io.Writer, copies *sync.WaitGroup, failed func(error)) (*os.File, error) {
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating an output pipe for the guest: %w", err)
	}
	if w == nil {
		w = io.Discard
	}
	copies.Add(1)
	go func() {
		defer copies.Done()
		defer r.Close()
		if _, err := io.Copy(w, r); err != nil {
			failed(err)
			_, _ = io.Copy(io.Discard, r)
		}
	}()
	return pw, nil
}

// startAtNormalPriority starts cmd at niceness 0, whatever its caller's:
// with HOST_NICE set, make test runs the host's suites niced so that the
// guests beside them get prompt turns, and a guest one of those suites boots
// must not inherit it.
// Niceness is per thread and a child takes its forking thread's, so the
// fork happens on a locked thread set to 0 (best effort: raising priority
// needs CAP_SYS_NICE).
func startAtNormalPriority(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, 0)
	return cmd.Start()
}
