// Package cliexit turns a benchmark tool's error into its exit status and
// message, so every tool exits alike: 0, 2 for a wrong use (with the usage
// text), 1 for a failure.
package cliexit

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// usageError is an error of the arguments or input files: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// BadUsage is an error of the arguments or input files.
func BadUsage(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

// Status writes what err means for tool name to stderr and returns the
// exit status: flag.ErrHelp prints usage, a BadUsage error the error and
// usage (2), any other the error (1).
func Status(name, usage string, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		return 2
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "%s: %v\n%s", name, err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
}
