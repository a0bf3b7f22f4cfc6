// Package kernel probes, once at start, which kernel and userland features the
// proxy modes depend on (iptables backends, IPVS, ipset, dummy links, SCTP,
// conntrack) and chooses the proxy mode that can run on this node.
package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Runner runs one command. Stdin may be nil. On failure it returns a
// *CommandError so callers can read the command's own complaint. Tests
// substitute fakes that fail the way the real tools do.
type Runner interface {
	Run(ctx context.Context, stdin []byte, name string, args ...string) (stdout []byte, err error)
}

// CommandError is a command that could not start or exited non-zero.
type CommandError struct {
	Command  string // the command line, for messages
	ExitCode int    // -1 when the command did not start
	Stderr   string
	Err      error
}

func (e *CommandError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		return fmt.Sprintf("%s: %v", e.Command, e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", e.Command, e.Err, msg)
}

func (e *CommandError) Unwrap() error { return e.Err }

// NotFound reports whether the command's binary is not installed.
func (e *CommandError) NotFound() bool { return errors.Is(e.Err, exec.ErrNotFound) }

// ExecRunner runs commands with os/exec.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		code := -1
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		}
		return stdout.Bytes(), &CommandError{
			Command:  strings.Join(append([]string{name}, args...), " "),
			ExitCode: code,
			Stderr:   stderr.String(),
			Err:      err,
		}
	}
	return stdout.Bytes(), nil
}
