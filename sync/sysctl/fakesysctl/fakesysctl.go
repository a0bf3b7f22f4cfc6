// Package fakesysctl is an in-memory sysctl.Sysctls that fails as the
// kernel does: the contract tests in package sysctl run every case on it and
// on a real /proc/sys.
package fakesysctl

import (
	"maps"
	"strings"
	"sync"
	"syscall"

	"kproxy.dev/kproxy/sync/sysctl"
)

// Sysctls holds the sysctls a kernel has. Only names it was given exist;
// reading or writing any other fails with ENOENT. It is safe for concurrent
// use.
type Sysctls struct {
	mu        sync.Mutex
	values    map[string]string
	readErrs  map[string]syscall.Errno
	writeErrs map[string]syscall.Errno
	writes    []string
}

var _ sysctl.Sysctls = (*Sysctls)(nil)

// New returns a kernel having the given sysctls with their values.
func New(values map[string]string) *Sysctls {
	s := &Sysctls{values: map[string]string{}, readErrs: map[string]syscall.Errno{}, writeErrs: map[string]syscall.Errno{}}
	maps.Copy(s.values, values)
	return s
}

// FailWrites makes writes of name fail with errno, 0 making them succeed
// again: EACCES as nf_conntrack_max in a network namespace, EROFS as a
// read-only /proc/sys, EOPNOTSUPP as the conntrack hash size outside the
// initial namespace.
func (s *Sysctls) FailWrites(name string, errno syscall.Errno) { s.fail(s.writeErrs, name, errno) }

// FailReads makes reads of name fail with errno, 0 making them succeed again.
func (s *Sysctls) FailReads(name string, errno syscall.Errno) { s.fail(s.readErrs, name, errno) }

func (s *Sysctls) fail(errs map[string]syscall.Errno, name string, errno syscall.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errno == 0 {
		delete(errs, name)
		return
	}
	errs[name] = errno
}

// Read implements sysctl.Sysctls.
func (s *Sysctls) Read(name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(s.readErrs, name); err != 0 {
		return "", &sysctl.Error{Op: sysctl.OpRead, Name: name, Err: err}
	}
	return strings.TrimSpace(s.values[name]), nil
}

// Write implements sysctl.Sysctls.
func (s *Sysctls) Write(name, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(s.writeErrs, name); err != 0 {
		return &sysctl.Error{Op: sysctl.OpWrite, Name: name, Value: value, Err: err}
	}
	s.values[name] = value
	s.writes = append(s.writes, name+"="+value)
	return nil
}

// check returns the errno an access to name fails with, 0 if none; s.mu
// is held.
func (s *Sysctls) check(errs map[string]syscall.Errno, name string) syscall.Errno {
	if !sysctl.ValidName(name) {
		return syscall.EINVAL
	}
	if _, ok := s.values[name]; !ok {
		return syscall.ENOENT
	}
	return errs[name]
}

// Values returns a copy of every sysctl's value.
func (s *Sysctls) Values() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.values)
}

// Writes returns the successful writes so far, "name=value", in order.
func (s *Sysctls) Writes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.writes...)
}

// WritesOf counts the successful writes of name.
func (s *Sysctls) WritesOf(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.writes {
		if strings.HasPrefix(w, name+"=") {
			n++
		}
	}
	return n
}
