package ipvsscale

import (
	"time"
)

// Units BenchmarkGuestIPVSSync reports with b.ReportMetric, besides ns/op
// (one one-endpoint-change sync); ParseGuestOutput reads them back.
const (
	UnitFullSync          = "s/full-sync"         // first sync into an empty kernel
	UnitFullSyncOps       = "ops/full-sync"       // its handle calls
	UnitChange            = "ms/one-change"       // mean sync of a one-endpoint change
	UnitChangeOps         = "ops/one-change"      // mean handle calls of one
	UnitNoChangeOps       = "ops/no-change"       // an incremental sync with nothing changed
	UnitFullResync        = "s/full-resync"       // a periodic full sync with nothing changed
	UnitFullResyncReads   = "reads/full-resync"   // its listings
	UnitFullResyncEnsures = "ensures/full-resync" // its create-if-missing calls
	UnitFullResyncWrites  = "writes/full-resync"  // its writes (want 0)
)

// GuestResult is what BenchmarkGuestIPVSSync measured at one size.
type GuestResult struct {
	Ports int
	// FullSync is the first sync into an empty namespace, FullSyncOps its
	// handle calls.
	FullSync    time.Duration
	FullSyncOps int
	// Changes is how many one-endpoint-change syncs Change and ChangeOps
	// average.
	Changes   int
	Change    time.Duration
	ChangeOps float64
	// NoChangeOps are the handle calls of an incremental sync that has
	// nothing to do.
	NoChangeOps int
	// FullResync is a periodic full sync (the kernel re-read) with nothing
	// changed: its time, listings, create-if-missing calls and writes.
	FullResync        time.Duration
	FullResyncReads   int
	FullResyncEnsures int
	FullResyncWrites  int
}

// Row is one size's host and guest halves; Guest is nil when the guest
// half did not report.
type Row struct {
	Ports int
	// Build is one desired-state computation on the host.
	Build time.Duration
	Guest *GuestResult
}
