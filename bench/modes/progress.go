package modes

import (
	"fmt"
	"io"
	"runtime"
	"time"
)

// Estimates of what each step costs on a 2-core machine, from a full run
// (about 25 s a cell at 1 and 1,000 services, most of it the data plane;
// kernel-bound syncs and clean-ups at 10,000); the time left shown is
// scaled by how the run has kept to them so far.
const (
	estSizeSetUp      = 3 * time.Second         // API server, lab, servers
	estPerObject      = 4700 * time.Microsecond // creating one service and its slice
	estCellBase       = 2 * time.Second         // start, quiet waits, one change, clean-up
	estPerService     = 3 * time.Millisecond    // a kproxy cell's first sync and clean-up, per service
	estPerServiceKube = 4500 * time.Microsecond // kube-proxy's
	estNewService     = 500 * time.Millisecond
	estGuestPerSize   = 2 * time.Minute
	estRunOverhead    = 700 * time.Millisecond // per data-plane run
)

// Plan is the run's steps as the estimate sees them.
type Plan struct {
	Config Config
	// NoFile and Loops are what skipReason weighs (zero: skip nothing).
	NoFile, Loops int
}

// newPlan is cfg's plan on this machine: the descriptor limit (raised as
// far as it goes) and the event loops decide which cells are skipped.
func newPlan(cfg Config) Plan {
	return Plan{Config: cfg, NoFile: raiseNoFile(), Loops: runtime.GOMAXPROCS(0)}
}

// SizeCost is the estimate for one size of the host section.
func (p Plan) SizeCost(size int) time.Duration {
	d := estSizeSetUp + time.Duration(size)*estPerObject + 2*p.dataCost() // the reference, twice
	for _, id := range p.Config.Modes {
		d += p.CellCost(id, size)
	}
	return d
}

// CellCost is the estimate for one mode at one size.
func (p Plan) CellCost(id string, size int) time.Duration {
	m, err := hostModeOf(id)
	if err != nil || (p.NoFile > 0 && skipReason(m, size, p.NoFile, p.Loops) != "") {
		return 0
	}
	per := estPerService
	if m.Proxy != "kproxy" {
		per = estPerServiceKube
	}
	return estCellBase + time.Duration(size)*per + time.Duration(p.Config.NewServiceRepeats)*estNewService + p.dataCost()
}

// dataCost is one cell's data-plane runs.
func (p Plan) dataCost() time.Duration {
	runs := time.Duration(len(Workloads()) * p.Config.Repeats)
	return runs * (p.Config.RunFor() + estRunOverhead)
}

// GuestCost is the estimate for the guest section.
func (p Plan) GuestCost() time.Duration {
	if !p.Config.Guest {
		return 0
	}
	return time.Duration(len(p.Config.GuestSizes)) * estGuestPerSize
}

// Total is the estimate for the whole run.
func (p Plan) Total() time.Duration {
	var d time.Duration
	for _, n := range p.Config.Sizes {
		d += p.SizeCost(n)
	}
	return d + p.GuestCost()
}

// Progress prints where the run is and how long it has left: the estimate
// of what remains, scaled by elapsed time over the estimate of what is
// done.
type Progress struct {
	Out     io.Writer
	Started time.Time
	Total   time.Duration // the estimate of the whole run
	// Done is the estimate of the steps finished so far.
	Done time.Duration
	Now  func() time.Time
}

// Step records that a step estimated at est finished.
func (p *Progress) Step(est time.Duration) { p.Done += est }

// Left is the time the rest of the run should take.
func (p *Progress) Left() time.Duration {
	elapsed := p.now().Sub(p.Started)
	rest := max(p.Total-p.Done, 0)
	if p.Done > time.Minute {
		scale := float64(elapsed) / float64(p.Done)
		rest = time.Duration(float64(rest) * min(max(scale, 0.5), 3))
	}
	return rest
}

// Printf prints one progress line: clock, elapsed, time left, message.
func (p *Progress) Printf(format string, args ...any) {
	now := p.now()
	fmt.Fprintf(p.Out, "bench-modes %s [%s elapsed, about %s left] %s\n", now.Format("15:04:05"),
		now.Sub(p.Started).Round(time.Second), p.Left().Round(10*time.Second), fmt.Sprintf(format, args...))
}

func (p *Progress) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}
