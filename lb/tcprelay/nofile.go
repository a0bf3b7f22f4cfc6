package tcprelay

import (
	"fmt"
	"syscall"
)

// NoFileLimit reports RLIMIT_NOFILE before and after RaiseNoFileLimit.
type NoFileLimit struct {
	OldSoft, NewSoft, Hard uint64
}

// RaiseNoFileLimit raises the soft RLIMIT_NOFILE to the hard limit: every
// proxied TCP connection holds two descriptors. (Go's os package already
// does this at start on Linux; calling it makes the limit explicit, reports
// it, and through syscall.Setrlimit lets child processes inherit it.)
func RaiseNoFileLimit() (NoFileLimit, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return NoFileLimit{}, fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	res := NoFileLimit{OldSoft: lim.Cur, NewSoft: lim.Cur, Hard: lim.Max}
	if lim.Cur >= lim.Max {
		return res, nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return res, fmt.Errorf("raising RLIMIT_NOFILE soft limit from %d to %d: %w", res.OldSoft, lim.Max, err)
	}
	res.NewSoft = lim.Max
	return res, nil
}
