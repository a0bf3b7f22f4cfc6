// Package conntrack will tune the kernel's connection tracking at start and
// remove stale UDP/SCTP flows after each sync, from the service map's change
// sets (servicemap.ChangeSet.StaleEndpoints, Removed and NewlyServed carry
// what it needs).
//
// It holds no code yet: that is issue 5. The conntrack flags are accepted and
// validated by cmd/kproxy/options, and have no effect until then.
package conntrack
