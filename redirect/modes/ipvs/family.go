package ipvs

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/reconcile"
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// family is the IPVS mode for one IP family.
type family struct {
	fam  ipfamily.Family
	base desired.Config // the configured part; the rest comes from each snapshot
	// node completes base from each snapshot; its LocalAddrs lists the
	// node's addresses but kube-ipvs0's (nil: base.LocalAddrs stand).
	node    kernelmode.Node
	rec     *reconcile.Reconciler
	tables  Tables
	metrics *modeMetrics
	logger  klog.Logger

	// lastPayload is the iptables layer the last successful restore
	// wrote; "" forces the next restore.
	lastPayload string
	// inForce is the desired state of the last sync that fully succeeded,
	// for /services; desired states are never modified once built.
	inForce atomic.Pointer[desired.State]
}

// configFor completes the configured desired.Config from the snapshot and
// the node's current addresses.
func (f *family) configFor(snap *servicemap.Snapshot) (desired.Config, error) {
	cfg := f.base
	facts := f.node.Read(snap)
	cfg.Topology = facts.Topology
	cfg.NodePortAddresses = facts.NodePortAddresses
	if cidrs, ok := f.node.LocalCIDRs(facts); ok {
		cfg.ClusterCIDRs = cidrs
	}
	if f.node.LocalAddrs != nil {
		addrs, err := f.node.Addrs()
		if err != nil {
			return cfg, err
		}
		cfg.LocalAddrs = addrs
	}
	if len(cfg.NodeIPs) == 0 {
		cfg.NodeIPs = facts.NodeIPs
	}
	return cfg, nil
}

// sync brings this family's virtual servers, addresses, sets and iptables
// layer in line with snap, and returns the desired state (nil when it could
// not be built). A reconcile failure does
// not stop the iptables layer: it is the same for every service, and the
// services that did sync need it.
func (f *family) sync(ctx context.Context, snap *servicemap.Snapshot, full bool) (*desired.State, error) {
	cfg, err := f.configFor(snap)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.fam, err)
	}
	st, err := desired.Build(cfg, snap)
	if err != nil {
		return nil, fmt.Errorf("%s: building the desired state: %w", f.fam, err)
	}
	for _, c := range st.Conflicts {
		f.logger.V(2).Info("Two service ports want one IPVS virtual server; the first keeps it",
			"family", f.fam, "virtualServer", c.Key, "kept", c.Kept, "refused", c.Loser)
	}
	res, recErr := f.rec.Sync(ctx, st, full)
	if recErr != nil {
		f.metrics.reconcileFailures.WithLabelValues(string(f.fam)).Inc()
		recErr = fmt.Errorf("reconciling IPVS: %w", recErr)
	}
	iptErr := f.applyTables(ctx, st, full)
	f.report(st, res)
	if err := errors.Join(recErr, iptErr); err != nil {
		return st, fmt.Errorf("%s: %w", f.fam, err)
	}
	f.inForce.Store(st)
	return st, nil
}

// applyTables restores the iptables layer when its text changed since the
// last successful restore, or on a full sync, then ensures the jumps into
// it. The layer's chains are declared, so each restore rewrites them whole.
func (f *family) applyTables(ctx context.Context, st *desired.State, full bool) error {
	payload := desired.RenderTables(st.Tables)
	if payload == f.lastPayload && !full {
		return nil
	}
	f.lastPayload = ""
	if err := f.tables.Restore(ctx, []byte(payload)); err != nil {
		f.metrics.Failures.Inc()
		return fmt.Errorf("restoring the iptables layer: %w", err)
	}
	jumps, err := desired.RestoreJumps(st.Jumps)
	if err != nil {
		return err
	}
	if err := f.tables.EnsureJumps(ctx, jumps); err != nil {
		return fmt.Errorf("ensuring the jumps into the iptables layer: %w", err)
	}
	f.lastPayload = payload
	return nil
}

// report sets the gauges from the desired state and the reconcile result.
func (f *family) report(st *desired.State, res reconcile.Result) {
	fam := string(f.fam)
	rs := 0
	for _, s := range st.Services {
		rs += len(s.RealServers)
	}
	f.metrics.virtualServers.WithLabelValues(fam).Set(float64(len(st.Services)))
	f.metrics.realServers.WithLabelValues(fam).Set(float64(rs))
	f.metrics.draining.WithLabelValues(fam).Set(float64(res.Draining))
	f.metrics.conflictingServers.WithLabelValues(fam).Set(float64(len(st.Conflicts)))
	for _, t := range st.Tables {
		n := 0
		for _, c := range t.Chains {
			n += len(c.Rules)
		}
		f.metrics.Rules.WithLabelValues(t.Name, fam).Set(float64(n))
	}
}

// drain deletes the drained real servers of this family.
func (f *family) drain() error {
	res, err := f.rec.Drain()
	f.metrics.draining.WithLabelValues(string(f.fam)).Set(float64(res.Draining))
	if err != nil {
		f.metrics.reconcileFailures.WithLabelValues(string(f.fam)).Inc()
		return fmt.Errorf("%s: %w", f.fam, err)
	}
	return nil
}
