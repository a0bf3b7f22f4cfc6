// Package mode defines the one interface every proxy mode (userspace,
// iptables, ipvs, nftables) implements, so they all receive the same
// snapshots: the side of the mode contract the engine and /healthz need.
// How a mode is described, chosen and built (Definition, Settings, Deps,
// Choose) is in redirect/modes/contract, above the ground floor.
package mode

import (
	"context"

	"kproxy.dev/kproxy/sync/servicemap"
)

// Name is a --proxy-mode value.
type Name string

const (
	Userspace Name = "userspace"
	IPTables  Name = "iptables"
	IPVS      Name = "ipvs"
	NFTables  Name = "nftables"
)

// Mode programs snapshots into the kernel or the userspace data plane.
type Mode interface {
	Name() Name
	// Sync makes the node match snap. changes says what differs from the
	// snapshot of the last successful Sync; when changes.Full is set the mode
	// must rewrite everything it owns. A returned error means the previous
	// state may still be (partly) in force; the caller retries with the
	// changes merged.
	Sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error
	// Close stops the mode's background work without removing what it
	// programmed (a restart must not drop traffic); Cleanup does that.
	// The userspace mode is the exception: its portals lead to its own
	// relays, which stop with it, so it withdraws them rather than leave
	// service traffic to whoever binds the freed ports.
	Close() error
}

// Initializer is a mode with node set-up of its own that needs full root
// privileges and is otherwise done by its first Sync (the IPVS sysctls).
// --init-only builds the mode (New does the rest of its set-up), calls
// Init, and exits without syncing, as kube-proxy's --init-only does.
type Initializer interface {
	Init(ctx context.Context) error
}

// Backlogger is a mode that may write a large change over several syncs, a
// bounded part at a time, so that a small change queued behind it (an
// endpoint removal) is not held up until all of it is written. Backlog
// counts the service ports a successful Sync left to write; while it is
// not zero the caller syncs again as soon as its rate limit allows, and
// the snapshot is not yet fully in force.
type Backlogger interface {
	Backlog() int
}

// ConflictReporter is a mode whose service addresses other sockets on the
// node can hold, taking their traffic (the userspace mode's local portals,
// each service port an ordinary socket). PortalConflicts counts the
// addresses held at the last sync and names the first few; /healthz
// reports them.
type ConflictReporter interface {
	PortalConflicts() (count int, shown []string)
}
