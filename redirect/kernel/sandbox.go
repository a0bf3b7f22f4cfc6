package kernel

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Sandbox runs the probes that create things (chains, sets, links) in a
// network namespace of their own, discarded afterwards. Kernel abilities
// (modules, xtables targets, nf_tables, ipset types, link kinds) are the same
// in every namespace, but tables, sets and links are per namespace: probing
// in the node's own namespace would register empty nat and filter tables
// there, which stay after the probe chains are gone.
type Sandbox interface {
	// Do runs fn in a fresh network namespace and returns when fn has
	// returned. fn must make its netlink calls and start its commands on the
	// goroutine it was called on; goroutines it starts are in the node's
	// namespace. Do fails only when no namespace could be made, and fn has
	// then not run.
	Do(fn func()) error
}

// ThreadSandbox is the real Sandbox: fn runs on an OS thread that leaves the
// process's network namespace for a new one. Commands started there inherit
// the thread's namespace (Go forks from the calling thread) and netlink
// sockets opened there belong to it. The thread is never unlocked, so Go
// ends it when fn returns instead of reusing it, and with its last user gone
// the namespace and everything probed into it disappear. Needs
// CAP_SYS_ADMIN; no external binary.
type ThreadSandbox struct{}

var _ Sandbox = ThreadSandbox{}

// Do implements Sandbox.
func (ThreadSandbox) Do(fn func()) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			// The thread is unchanged, so it may go back to the pool.
			runtime.UnlockOSThread()
			done <- fmt.Errorf("creating a throwaway network namespace: unshare(CLONE_NEWNET): %w", err)
			return
		}
		// No UnlockOSThread: see ThreadSandbox.
		fn()
		done <- nil
	}()
	return <-done
}
