package kernelmode

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Families are a kernel mode's IP families (one, or two on a dual-stack
// node), fixed when the mode is built, behind the lock every sync holds
// throughout: the mode's state is its families'.
type Families[F any] struct {
	mu   sync.Mutex
	list []F
}

// Add adds a family; the mode's New adds them all before any sync.
func (fs *Families[F]) Add(f F) { fs.list = append(fs.list, f) }

// List returns the families without the lock, for what reads a family's
// state under a lock of its own (/services).
func (fs *Families[F]) List() []F { return fs.list }

// Each runs fn for every family under the lock. A failing family does not
// stop the other: the errors are joined.
func (fs *Families[F]) Each(fn func(F) error) error {
	return fs.Locked(func(list []F) error { return EachOf(list, fn) })
}

// Locked runs fn with the lock held, for a sync that does more than visit
// each family (reads around the loop, state of the mode's own).
func (fs *Families[F]) Locked(fn func([]F) error) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fn(fs.list)
}

// EachOf runs fn for every family of list, joining the errors.
func EachOf[F any](list []F, fn func(F) error) error {
	var errs []error
	for _, f := range list {
		if err := fn(f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Resync is one family's full-or-partial decision. A partial sync writes
// the difference from what the family last wrote, so it needs the kernel
// to hold that: a failure, or someone else's change, leaves the kernel's
// state unknown, and the next sync reads it and rewrites everything.
type Resync struct {
	needFull bool
}

// Full says whether this sync rewrites everything: changes asks for it,
// the kernel's state is unknown, or nothing was written yet (!synced).
func (r *Resync) Full(changes *servicemap.ChangeSet, synced bool) bool {
	return changes.Full || r.needFull || !synced
}

// Unknown says whether the kernel's state is unknown, to be read before a
// full sync rather than taken from what was written.
func (r *Resync) Unknown() bool { return r.needFull }

// Damaged marks the kernel's state unknown: someone else changed it.
func (r *Resync) Damaged() { r.needFull = true }

// Synced records a full sync the kernel took.
func (r *Resync) Synced() { r.needFull = false }

// Failed marks the state unknown and names the family in err.
func (r *Resync) Failed(fam ipfamily.Family, err error) error {
	r.needFull = true
	return fmt.Errorf("%s: %w", fam, err)
}

// RuleSync declares kube-proxy's rule-sync metrics (sync/metrics.RuleSync)
// for the modes that write rules; each family syncs through its own view.
type RuleSync struct {
	vecs *metrics.RuleSync
}

// NewRuleSync declares and registers the metrics of modeName (its
// kproxy_<mode>_service_port_errors_total) on reg (nil: nowhere).
func NewRuleSync(reg prometheus.Registerer, modeName string) (RuleSync, error) {
	vecs, err := metrics.NewRuleSync(reg, modeName)
	if err != nil {
		return RuleSync{}, err
	}
	return RuleSync{vecs: vecs}, nil
}

// For returns fam's view, whose series exist from the start (at zero).
func (r RuleSync) For(fam ipfamily.Family) SyncMetrics {
	f := string(fam)
	return SyncMetrics{
		FullDuration:    r.vecs.FullDuration.HistogramVec.WithLabelValues(f),
		PartialDuration: r.vecs.PartialDuration.HistogramVec.WithLabelValues(f),
		PortErrors:      r.vecs.PortErrors.CounterVec.WithLabelValues(f).Inc,
	}
}

// Lazy returns fam's view, whose series appear at their first use.
func (r RuleSync) Lazy(fam ipfamily.Family) SyncMetrics {
	f := string(fam)
	return SyncMetrics{
		FullDuration: prometheus.ObserverFunc(func(v float64) {
			r.vecs.FullDuration.HistogramVec.WithLabelValues(f).Observe(v)
		}),
		PartialDuration: prometheus.ObserverFunc(func(v float64) {
			r.vecs.PartialDuration.HistogramVec.WithLabelValues(f).Observe(v)
		}),
		PortErrors: func() { r.vecs.PortErrors.CounterVec.WithLabelValues(f).Inc() },
	}
}

// SyncMetrics is one family's view of RuleSync.
type SyncMetrics struct {
	FullDuration    prometheus.Observer
	PartialDuration prometheus.Observer
	// PortErrors counts a service port the rule model rejected (BuildPorts'
	// rejected).
	PortErrors func()
}

// Observe records the duration of a full or partial sync begun at start.
func (m SyncMetrics) Observe(full bool, start time.Time) {
	d := time.Since(start).Seconds()
	if full {
		m.FullDuration.Observe(d)
	} else {
		m.PartialDuration.Observe(d)
	}
}

// Touched lists, sorted and once each, the service ports changes touched:
// the changed ones and the removed ones.
func Touched(changes *servicemap.ChangeSet) []servicemap.ServicePortName {
	names := slices.Clone(changes.Changed)
	for _, sp := range changes.Removed {
		names = append(names, sp.Name)
	}
	slices.SortFunc(names, servicemap.ServicePortName.Compare)
	return slices.Compact(names)
}

// Programmed answers mode.Describer over families: chains lists what one
// family's last sync wrote for a port (nil: nothing), read under that
// family's lock, not the sync's, which a sync holds throughout. note
// explains a port with no chains.
func Programmed[F any](fams []F, chains func(F, servicemap.ServicePortName) []mode.Chain, note string) func(servicemap.ServicePortName) mode.Programmed {
	return func(name servicemap.ServicePortName) mode.Programmed {
		var out mode.Programmed
		for _, f := range fams {
			out.Chains = append(out.Chains, chains(f, name)...)
		}
		if len(out.Chains) == 0 {
			out.Note = note
		}
		return out
	}
}
