// Package reconcile applies a desired IPVS state (redirect/modes/ipvs/desired) to
// the kernel through the narrow handles (redirect/modes/ipvs/handles): it computes
// the difference from what is there and issues only those operations.
//
// What is there is read from the kernel on the first sync, on a full sync
// and after any failure; otherwise the reconciler trusts what it applied
// last and visits only the virtual servers and sets whose desired state
// changed since, so a one-endpoint change costs a few netlink operations
// and little Go time whatever the number of services. Each virtual server
// is brought up in an order that never lets traffic reach it half-built
// (create it, add or re-weight real servers, then bind its address) and
// torn down in the reverse order (unbind, then delete). A failure stops
// only that virtual server; the error names it, and the next sync re-reads
// the kernel and retries.
//
// Removed TCP real servers drain gracefully: weight 0 first, deleted once
// they hold no connection or DrainTimeout has passed. UDP and SCTP ones
// go at once and are reported, for conntrack cleanup.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// DefaultDrainTimeout bounds how long a removed TCP real server may keep
// connections before it is deleted anyway.
const DefaultDrainTimeout = 15 * time.Minute

// Options configure a Reconciler for one family.
type Options struct {
	IPVS   handles.IPVS
	Link   handles.Link
	IPSets handles.IPSets
	Family ipfamily.Family
	// ExcludeCIDRs is --ipvs-exclude-cidrs: virtual servers inside them
	// belong to someone else and are never touched.
	ExcludeCIDRs []netip.Prefix
	// DrainTimeout: 0 means DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Clock: nil means the real clock.
	Clock clock.PassiveClock
}

// RealServerRef names one real server of one virtual server.
type RealServerRef struct {
	VirtualServer desired.Key
	RealServer    netip.AddrPort
}

// Result says what a sync did that others must follow up.
type Result struct {
	// RemovedRealServers were deleted from UDP or SCTP virtual servers
	// (at once) or from TCP ones (after draining); conntrack entries to
	// them should go.
	RemovedRealServers []RealServerRef
	// RemovedVirtualServers were deleted with whatever real servers they had.
	RemovedVirtualServers []desired.Key
	// Draining counts TCP real servers at weight 0 waiting for their
	// connections to end.
	Draining int
}

// Reconciler keeps one family's IPVS state, addresses and sets in line with
// the desired state. It is not safe for concurrent use.
type Reconciler struct {
	opts Options
	// cur is what the kernel holds as far as we know; nil forces a read.
	cur *current
	// draining maps removed TCP real servers to when their drain began.
	draining map[RealServerRef]time.Time
}

// New returns a Reconciler; its first Sync reads the kernel.
func New(opts Options) (*Reconciler, error) {
	if opts.IPVS == nil || opts.Link == nil || opts.IPSets == nil {
		return nil, errors.New("reconcile: IPVS, Link and IPSets are required")
	}
	if opts.Family != ipfamily.IPv4 && opts.Family != ipfamily.IPv6 {
		return nil, fmt.Errorf("reconcile: unknown family %q", opts.Family)
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.ExcludeCIDRs = slices.Clone(opts.ExcludeCIDRs)
	return &Reconciler{opts: opts, draining: make(map[RealServerRef]time.Time)}, nil
}

// owned says whether a virtual server is this reconciler's to manage: of
// its family and outside the excluded ranges.
func (r *Reconciler) owned(k desired.Key) bool {
	if (r.opts.Family == ipfamily.IPv6) != k.Addr.Is6() {
		return false
	}
	return !slices.ContainsFunc(r.opts.ExcludeCIDRs, func(p netip.Prefix) bool { return p.Contains(k.Addr) })
}

// Sync makes the kernel match want. full re-reads the kernel first (do it
// periodically, to repair what others changed). On error the state is
// partly applied, never half-applied per virtual server, and the next Sync
// re-reads the kernel and finishes the job.
func (r *Reconciler) Sync(ctx context.Context, want *desired.State, full bool) (Result, error) {
	if want == nil || want.Family != r.opts.Family {
		return Result{}, fmt.Errorf("reconcile: desired state is not for %s", r.opts.Family)
	}
	if full || r.cur == nil {
		cur, err := r.read()
		if err != nil {
			r.cur = nil
			return Result{}, err
		}
		r.cur = cur
	}
	var res Result
	var errs []error
	// Set members first (they only admit or masquerade traffic), stale
	// addresses and virtual servers next, then the wanted virtual
	// servers, and stale members last. Only what changed since it was
	// last applied is visited (see applied.go).
	sets := r.changedSets(want)
	errs = append(errs, r.addSetMembers(want, sets)...)
	unbound, addrErrs := r.removeStaleAddrs(want)
	errs = append(errs, addrErrs...)
	plan := r.planServices(want, unbound)
	dropped, delErrs := r.removeUnwanted(plan, &res)
	errs = append(errs, delErrs...)
	added, syncErrs := r.syncServices(ctx, want, plan, &res)
	errs = append(errs, syncErrs...)
	if plan.record {
		r.cur.applied = rebuildApplied(r.cur.applied, dropped, added)
	}
	errs = append(errs, r.removeSetMembers(want, sets)...)
	errs = append(errs, r.drain(&res)...)
	res.Draining = len(r.draining)
	err := errors.Join(errs...)
	if err != nil {
		// What failed may be half-known (a timeout after the kernel
		// acted): read it all again next time.
		r.cur = nil
	}
	return res, err
}
