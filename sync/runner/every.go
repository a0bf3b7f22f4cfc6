package runner

import (
	"context"
	"time"
)

// Every calls fn every interval until ctx is done, the first time one
// interval after the call: for background chores (sweeps, drains) that
// need neither coalescing nor retries.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
