package conntrack

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"kproxy.dev/kproxy/sync/sysctl"
)

// The parameters Tune sets: sysctls, and the nf_conntrack module's hash
// size (a module parameter, see Params).
const (
	MaxSysctl                   = "net/netfilter/nf_conntrack_max"
	HashsizeParam               = "nf_conntrack/parameters/hashsize"
	TCPEstablishedTimeoutSysctl = "net/netfilter/nf_conntrack_tcp_timeout_established"
	TCPCloseWaitTimeoutSysctl   = "net/netfilter/nf_conntrack_tcp_timeout_close_wait"
	TCPBeLiberalSysctl          = "net/netfilter/nf_conntrack_tcp_be_liberal"
	UDPTimeoutSysctl            = "net/netfilter/nf_conntrack_udp_timeout"
	UDPStreamTimeoutSysctl      = "net/netfilter/nf_conntrack_udp_timeout_stream"
)

// Settings are kube-proxy's --conntrack-* flags. Zero values leave the
// kernel's value alone.
type Settings struct {
	// MaxPerCore times the CPU count, at least Min, is the table size
	// (nf_conntrack_max); 0 leaves the size and Min alone.
	MaxPerCore, Min       int
	TCPEstablishedTimeout time.Duration
	TCPCloseWaitTimeout   time.Duration
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal to 1 when true.
	TCPBeLiberal     bool
	UDPTimeout       time.Duration
	UDPStreamTimeout time.Duration
}

// Change is one parameter Tune wrote. Old is -1 when it could not be read.
type Change struct {
	// Path is the parameter's name (MaxSysctl, HashsizeParam, ...).
	Path     string
	Old, New int
}

// Tune applies s on a machine with cpus CPUs, as kube-proxy does at start:
// the table size, then the hash size raised to a quarter of it when
// smaller, then the timeouts. A parameter already at its value is not
// written. Every parameter is attempted whatever happened to the others;
// the error joins one error per parameter that could not be set.
func Tune(p Params, s Settings, cpus int) ([]Change, error) {
	var changes []Change
	var errs []error
	set := func(name string, want int) bool {
		c, err := setParam(p.of(name), name, want)
		if err != nil {
			errs = append(errs, err)
			return false
		}
		if c != nil {
			changes = append(changes, *c)
		}
		return true
	}
	if max := TableSize(s, cpus); max > 0 && set(MaxSysctl, max) {
		// A larger table with the old hash size means long bucket chains.
		// The hash size can only be raised from the initial namespace, so
		// it is only read when the table size could be set at all.
		if cur, err := sysctl.ReadInt(p.of(HashsizeParam), HashsizeParam); err != nil || cur < max/4 {
			set(HashsizeParam, max/4)
		}
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{TCPEstablishedTimeoutSysctl, s.TCPEstablishedTimeout},
		{TCPCloseWaitTimeoutSysctl, s.TCPCloseWaitTimeout},
		{UDPTimeoutSysctl, s.UDPTimeout},
		{UDPStreamTimeoutSysctl, s.UDPStreamTimeout},
	} {
		if t.d > 0 {
			set(t.name, seconds(t.d))
		}
	}
	if s.TCPBeLiberal {
		set(TCPBeLiberalSysctl, 1)
	}
	return changes, errors.Join(errs...)
}

// TableSize is the nf_conntrack_max s asks for on cpus CPUs: MaxPerCore
// per CPU but at least Min, or 0 (leave it) when MaxPerCore is 0.
func TableSize(s Settings, cpus int) int {
	if s.MaxPerCore <= 0 {
		return 0
	}
	return max(s.MaxPerCore*cpus, s.Min)
}

// seconds converts a timeout to the whole seconds the sysctls take. A
// positive timeout under a second becomes 1: 0 would expire entries at once.
func seconds(d time.Duration) int {
	return max(int(d/time.Second), 1)
}

// setParam writes want to name unless it already holds it, and returns what
// it changed (nil when nothing) or an error naming the parameter (the
// sysctl package's errors do).
func setParam(s sysctl.Sysctls, name string, want int) (*Change, error) {
	old, err := sysctl.ReadInt(s, name)
	if err == nil && old == want {
		return nil, nil
	}
	if err != nil {
		old = -1
	}
	if err := sysctl.WriteInt(s, name, want); err != nil {
		return nil, fmt.Errorf("%w%s", err, hint(name, err))
	}
	return &Change{Path: name, Old: old, New: want}, nil
}

// hint explains the usual reasons a parameter cannot be set.
func hint(name string, err error) string {
	switch {
	case name == MaxSysctl && errors.Is(err, fs.ErrPermission):
		return " (nf_conntrack_max is read-only outside the initial network namespace; " +
			"--conntrack-max-per-core=0 leaves it alone)"
	case name == HashsizeParam && errors.Is(err, syscall.EOPNOTSUPP):
		return " (the hash size can only be set from the initial network namespace)"
	case errors.Is(err, syscall.EROFS):
		return " (mounted read-only, as container runtimes often mount /proc/sys and /sys)"
	case errors.Is(err, fs.ErrNotExist):
		return " (is the nf_conntrack module loaded?)"
	}
	return ""
}
