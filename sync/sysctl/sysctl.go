// Package sysctl is the one way kproxy reads and writes kernel sysctls, so
// tests can substitute a fake (fakesysctl) that fails as the kernel does.
//
// Names are slash-separated paths under /proc/sys ("net/ipv4/ip_forward"),
// never dotted: a dot may be part of an interface name
// ("net/ipv4/conf/eth0.100/rp_filter").
package sysctl

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Sysctls reads and writes sysctls. Errors are *Error, wrapping the
// kernel's errno: ENOENT for a sysctl the kernel lacks, EACCES for a
// read-only one (nf_conntrack_max outside the initial network namespace),
// EROFS when /proc/sys is mounted read-only, EINVAL for a bad name or value.
type Sysctls interface {
	// Read returns the value without surrounding white space.
	Read(name string) (string, error)
	// Write sets the value.
	Write(name, value string) error
}

// Error is a failed read or write, naming the sysctl.
type Error struct {
	// Op is "reading" or "writing".
	Op string
	// Name is the sysctl's name, or its file's full path when the
	// Sysctls are not /proc/sys (module parameters, a test directory).
	Name string
	// Value is the value written (writes only).
	Value string
	// Err is the kernel's errno.
	Err error
}

// The values of Error.Op.
const (
	OpRead  = "reading"
	OpWrite = "writing"
)

func (e *Error) Error() string {
	what := "sysctl " + e.Name
	if filepath.IsAbs(e.Name) {
		what = e.Name
	}
	if e.Op == OpWrite {
		return fmt.Sprintf("%s %s=%s: %v", e.Op, what, e.Value, e.Err)
	}
	return fmt.Sprintf("%s %s: %v", e.Op, what, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ValidName says whether name can name a sysctl: a relative slash path
// without empty, "." or ".." elements, so it cannot leave the root.
func ValidName(name string) bool { return fs.ValidPath(name) && name != "." }

// DefaultRoot is where the kernel shows sysctls.
const DefaultRoot = "/proc/sys"

// ModulesRoot is where the kernel shows module parameters
// ("nf_conntrack/parameters/hashsize"), which Proc reads and writes as it
// does sysctls.
const ModulesRoot = "/sys/module"

// Proc is the real Sysctls: the files under Root. The zero value is the
// calling thread's network namespace's /proc/sys.
type Proc struct {
	// Root is DefaultRoot when empty.
	Root string
}

var _ Sysctls = Proc{}

// Read implements Sysctls.
func (p Proc) Read(name string) (string, error) {
	path, errName, err := p.path(name)
	if err != nil {
		return "", &Error{Op: OpRead, Name: errName, Err: err}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", &Error{Op: OpRead, Name: errName, Err: errno(err)}
	}
	return strings.TrimSpace(string(b)), nil
}

// Write implements Sysctls.
func (p Proc) Write(name, value string) error {
	path, errName, err := p.path(name)
	if err != nil {
		return &Error{Op: OpWrite, Name: errName, Value: value, Err: err}
	}
	// No O_CREATE: a sysctl the kernel lacks is an error, not a new file.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString(value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return &Error{Op: OpWrite, Name: errName, Value: value, Err: errno(err)}
	}
	return nil
}

// path returns name's file and how errors name it.
func (p Proc) path(name string) (path, errName string, err error) {
	root := p.Root
	root = cmp.Or(root, DefaultRoot)
	errName = name
	if root != DefaultRoot {
		errName = filepath.Join(root, name)
	}
	if !ValidName(name) {
		return "", name, syscall.EINVAL
	}
	return filepath.Join(root, name), errName, nil
}

// errno unwraps the *fs.PathError the os package adds: Error names the
// sysctl already.
func errno(err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ReadInt reads an integer sysctl.
func ReadInt(s Sysctls, name string) (int, error) {
	v, err := s.Read(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("sysctl %s holds %q, not an integer", name, v)
	}
	return n, nil
}

// WriteInt writes an integer sysctl.
func WriteInt(s Sysctls, name string, value int) error {
	return s.Write(name, strconv.Itoa(value))
}
