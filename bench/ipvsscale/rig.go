package ipvsscale

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/ipvs"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/redirect/modes/ipvs/reconcile"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Rig is an IPv4 reconciler over kernel handles (NewRig: the real ones of
// the calling process's network namespace), with every call it makes
// counted.
type Rig struct {
	// Kernel are the handles without counting, for reading back.
	Kernel  Handles
	Counter *Counter
	rec     *reconcile.Reconciler
	close   func()
}

// NewRig opens the handles (an IPVS generic-netlink socket, kube-ipvs0, the
// ipsets) in the current network namespace. Close it when done.
func NewRig() (*Rig, error) {
	h, err := ipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("opening the IPVS netlink handle: %w", err)
	}
	rig, err := RigOver(Handles{IPVS: h, Link: handles.NewLink(false), IPSets: handles.NetlinkIPSets{}})
	if err != nil {
		h.Close()
		return nil, err
	}
	rig.close = h.Close
	return rig, nil
}

// RigOver is a Rig over any handles, such as redirect/modes/ipvs/fakeipvs's.
func RigOver(h Handles) (*Rig, error) {
	counted, counter := Count(h)
	rec, err := reconcile.New(reconcile.Options{
		IPVS: counted.IPVS, Link: counted.Link, IPSets: counted.IPSets, Family: ipfamily.IPv4,
	})
	if err != nil {
		return nil, fmt.Errorf("ipvsscale rig: %w", err)
	}
	return &Rig{Kernel: h, Counter: counter, rec: rec, close: func() {}}, nil
}

// Close releases the IPVS socket; what was applied stays in the namespace.
func (r *Rig) Close() { r.close() }

// SyncResult is one sync's cost.
type SyncResult struct {
	Took time.Duration
	Ops  Counts
}

// Sync applies want (re-reading the kernel first when full) and returns
// how long it took and the handle calls it made.
func (r *Rig) Sync(ctx context.Context, want *desired.State, full bool) (SyncResult, error) {
	r.Counter.Reset()
	start := time.Now()
	_, err := r.rec.Sync(ctx, want, full)
	took := time.Since(start)
	if err != nil {
		return SyncResult{}, fmt.Errorf("syncing %d virtual servers (full=%t): %w", len(want.Services), full, err)
	}
	return SyncResult{Took: took, Ops: r.Counter.Counts()}, nil
}
