package conntrack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// DefaultReconcileInterval is how often a Cleaner reconciles when its
// Config does not say: kube-proxy's default sync period, so a node with
// defaults reconciles at about every periodic sync.
const DefaultReconcileInterval = 30 * time.Second

// Config configures a Cleaner. Table is required.
type Config struct {
	Table     Table
	Dataplane Dataplane
	// LocalAddresses lists the node's addresses; nil means unknown (node
	// ports then match on any address, and LocalRelays reconciliation
	// accepts any answering address).
	LocalAddresses func() ([]netip.Addr, error)
	// BoundUDPPorts lists the local ports UDP sockets are bound to, for
	// LocalRelays reconciliation; nil means BoundUDPPorts.
	BoundUDPPorts func() ([]uint16, error)
	// ReconcileInterval is the least time between reconciliations, which
	// also happen at the first sync and every full one. Zero means
	// DefaultReconcileInterval.
	ReconcileInterval time.Duration
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Clock times passes and reconciliation; nil means the wall clock.
	Clock clock.PassiveClock
}

// Cleaner deletes stale conntrack flows after each successful sync. Its
// AfterSync is meant as a sync/engine observer, which the engine calls from
// its one sync goroutine: a Cleaner is not safe for concurrent use.
type Cleaner struct {
	cfg     Config
	metrics *cleanupMetrics

	prev *servicemap.Snapshot
	// pending holds, per family, the filters of passes that failed, to be
	// sent again with the next pass.
	pending       map[ipfamily.Family][]Filter
	lastReconcile time.Time
}

// New checks cfg and returns a Cleaner.
func New(cfg Config) (*Cleaner, error) {
	if cfg.Table == nil {
		return nil, errors.New("conntrack cleaner: no table")
	}
	cfg.ReconcileInterval = cmp.Or(cfg.ReconcileInterval, DefaultReconcileInterval)
	if cfg.BoundUDPPorts == nil {
		cfg.BoundUDPPorts = BoundUDPPorts
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	m, err := newCleanupMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Cleaner{cfg: cfg, metrics: m, pending: map[ipfamily.Family][]Filter{}}, nil
}

// AfterSync deletes the flows the sync of snap (applying changes) made
// stale, plus, when due, every UDP flow reconciliation finds wrong.
// Failures are logged, counted and retried with the next call; they never
// stop the caller.
func (c *Cleaner) AfterSync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) {
	logger := klog.FromContext(ctx).WithValues("component", "conntrack")
	start := c.cfg.Clock.Now()
	filters := FiltersFor(c.prev, snap, changes)
	c.prev = snap
	reconcile := c.lastReconcile.IsZero() || (changes != nil && changes.Full) ||
		start.Sub(c.lastReconcile) >= c.cfg.ReconcileInterval

	reqs := c.requests(logger, snap, filters, reconcile)
	if len(reqs) == 0 {
		if reconcile {
			c.lastReconcile = start // nothing to reconcile is reconciled
		}
		return
	}
	deleted, failed := 0, false
	for _, req := range reqs {
		reqStart := c.cfg.Clock.Now()
		n, err := c.cfg.Table.Delete(req)
		deleted += n
		if req.Reconcile != nil {
			fam := string(req.Family)
			c.metrics.reconcileDuration.WithLabelValues(fam).Observe(c.cfg.Clock.Since(reqStart).Seconds())
			c.metrics.reconcileDeleted.WithLabelValues(fam).Add(float64(n))
		}
		if err != nil {
			failed = true
			c.pending[req.Family] = req.Filters
			c.metrics.failures.Inc()
			logger.Error(err, "Deleting stale conntrack flows failed; will retry after the next sync",
				"family", req.Family, "filters", len(req.Filters), "reconcile", req.Reconcile != nil)
			continue
		}
		delete(c.pending, req.Family)
	}
	if reconcile && !failed {
		c.lastReconcile = start
	}
	took := c.cfg.Clock.Since(start)
	c.metrics.deleted.Add(float64(deleted))
	c.metrics.duration.Observe(took.Seconds())
	logger.V(2).Info("Cleaned up conntrack after a sync", "deletedFlows", deleted, "filters", len(filters),
		"reconciled", reconcile, "duration", took)
}

// DataplaneStopped is called once the mode has stopped. Relays
// (LocalRelays) do not outlive kproxy, yet conntrack would keep redirecting
// their UDP and SCTP flows, for as long as datagrams keep coming, to proxy
// ports nobody holds: whoever bound one next would receive them. So it
// deletes every such flow to a destination of the last synced snapshot and
// returns how many went. The kernel modes' rules stay in the kernel, and
// their flows with them.
func (c *Cleaner) DataplaneStopped(ctx context.Context) (int, error) {
	if c.cfg.Dataplane != LocalRelays || c.prev == nil {
		return 0, nil
	}
	set := filterSet{}
	for name, sp := range c.prev.All() {
		if proto, ok := cleanedProtocol(name); ok {
			for _, dst := range destinationsOf(sp) {
				set.add(AllFlowsTo(proto, dst))
			}
		}
	}
	logger := klog.FromContext(ctx).WithValues("component", "conntrack")
	deleted, errs := 0, []error(nil)
	for _, req := range c.requests(logger, c.prev, set.list(), false) {
		n, err := c.cfg.Table.Delete(req)
		deleted += n
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting the stopped relays' %s flows: %w", req.Family, err))
		}
	}
	c.metrics.deleted.Add(float64(deleted))
	return deleted, errors.Join(errs...)
}

// requests builds one request per family that has something to select:
// this sync's filters, those pending from failed passes, and, when
// reconcile is set, the family's expectations.
func (c *Cleaner) requests(logger klog.Logger, snap *servicemap.Snapshot, filters []Filter, reconcile bool) []*Request {
	local := c.localAddresses(logger)
	var bound []uint16
	if reconcile && c.cfg.Dataplane == LocalRelays {
		var err error
		if bound, err = c.cfg.BoundUDPPorts(); err != nil {
			// Without it a flow to a dead relay port looks healthy; the
			// other checks still run.
			logger.Error(err, "Reconciling conntrack without checking relay ports")
		}
	}
	var reqs []*Request
	for _, fam := range ipfamily.All() {
		req := &Request{Family: fam, Filters: c.withPending(fam, filters), Local: local}
		if reconcile {
			req.Reconcile = ExpectationsOf(snap, fam, c.cfg.Dataplane, bound)
		}
		if !req.Empty() {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// withPending returns fam's filters from filters plus those still pending.
func (c *Cleaner) withPending(fam ipfamily.Family, filters []Filter) []Filter {
	set := filterSet{}
	for _, f := range filters {
		if f.Dst.Family == fam {
			set.add(f)
		}
	}
	for _, f := range c.pending[fam] {
		set.add(f)
	}
	return set.list()
}

// localAddresses returns the node's addresses, or nil (any address) when
// they are unknown.
func (c *Cleaner) localAddresses(logger klog.Logger) []netip.Addr {
	if c.cfg.LocalAddresses == nil {
		return nil
	}
	addrs, err := c.cfg.LocalAddresses()
	if err != nil {
		logger.Error(err, "Cleaning conntrack as if every address were the node's")
		return nil
	}
	if addrs == nil {
		addrs = []netip.Addr{} // known to be none, unlike nil
	}
	return slices.Clone(addrs)
}
