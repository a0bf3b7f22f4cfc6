package ipvsscale

import (
	"fmt"
	"slices"
	"time"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

// BuildRuns is how many desired-state builds the table's host half is the
// median of.
const BuildRuns = 5

// MeasureBuild times the desired-state computation of the workload's base
// snapshot (the host half of a sync) and returns the median of runs runs;
// the snapshot is made once, outside the timing.
func MeasureBuild(w Workload, runs int) (time.Duration, error) {
	if runs < 1 {
		return 0, fmt.Errorf("measuring the desired-state build: %d runs, want at least 1", runs)
	}
	snap, err := w.Snapshot(0)
	if err != nil {
		return 0, err
	}
	cfg := Config()
	took := make([]time.Duration, 0, runs)
	for range runs {
		start := time.Now()
		st, err := desired.Build(cfg, snap)
		took = append(took, time.Since(start))
		if err != nil {
			return 0, fmt.Errorf("desired state of %s: %w", w, err)
		}
		if len(st.Services) != w.Ports {
			return 0, fmt.Errorf("desired state of %s has %d virtual servers, want %d", w, len(st.Services), w.Ports)
		}
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}
