package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/redirect/modes/ipvs/reconcile"
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/runner"
	"kproxy.dev/kproxy/sync/servicemap"
	"kproxy.dev/kproxy/sync/sysctl"
)

// DefaultDrainInterval is how often draining TCP real servers are checked
// for remaining connections between syncs.
const DefaultDrainInterval = 5 * time.Second

// FamilyConfig configures one IP family; a dual-stack node has two.
type FamilyConfig struct {
	// Desired is the desired-state configuration; its Topology, its
	// LocalAddrs (when Config.LocalAddresses is set) and its NodeIPs (when
	// empty) are filled from each snapshot.
	Desired desired.Config
	IPVS    handles.IPVS
	Link    handles.Link
	IPSets  handles.IPSets
	Tables  Tables
}

// Config configures the IPVS mode.
type Config struct {
	Families []FamilyConfig
	// NodeName is this node's name (--hostname-override), for topology.
	NodeName string
	// ExcludeCIDRs is --ipvs-exclude-cidrs: virtual servers inside them
	// are someone else's and are never touched.
	ExcludeCIDRs []netip.Prefix
	// NodePorts is --nodeport-addresses, resolved per family at each sync
	// ("primary" needs the Node object).
	NodePorts nodeaddr.Policy
	// LocalAddresses lists the node's addresses on every interface but
	// kube-ipvs0, read on every sync (see handles.LocalAddressesExcept).
	LocalAddresses func() ([]netip.Addr, error)
	// NodeCIDRDetector is --detect-local-mode=NodeCIDR: each family's
	// ClusterCIDRs become the Node object's pod CIDRs of the family.
	NodeCIDRDetector bool
	// Sysctls writes the sysctls the mode needs; nil means the kernel's.
	Sysctls sysctl.Sysctls
	// DrainInterval: 0 means DefaultDrainInterval; negative starts no
	// background drain (Drain is then the caller's to call).
	DrainInterval time.Duration
	// DrainTimeout bounds a TCP real server's drain; 0 means
	// reconcile.DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Clock times drains; nil means the real clock.
	Clock clock.PassiveClock
	// Registry receives the mode's metrics; nil registers nowhere.
	Registry prometheus.Registerer
	Logger   klog.Logger
}

// Mode is kube-proxy's IPVS mode.
type Mode struct {
	sysctls sysctl.Sysctls
	logger  klog.Logger

	families kernelmode.Families[*family]
	// sysctlsDone, under the families' lock, holds the sysctls written (or warned about) so far, so
	// each is written once, and again on full syncs.
	sysctlsDone map[string]int

	stop      context.CancelFunc
	drainDone chan struct{}
	closeOnce sync.Once
}

var _ mode.Mode = (*Mode)(nil)

// New checks cfg and starts the background drain. Nothing is written to the
// kernel until the first Sync.
func New(cfg Config) (*Mode, error) {
	if len(cfg.Families) == 0 {
		return nil, errors.New("ipvs mode: no IP family configured")
	}
	met, err := newModeMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("ipvs mode: %w", err)
	}
	m := &Mode{sysctls: cfg.Sysctls, logger: cfg.Logger, sysctlsDone: map[string]int{}}
	if m.sysctls == nil {
		m.sysctls = sysctl.Proc{}
	}
	for _, fc := range cfg.Families {
		fam := fc.Desired.Family
		if fc.Tables == nil {
			return nil, fmt.Errorf("ipvs mode: %s: no iptables", fam)
		}
		if err := desired.Validate(fc.Desired); err != nil {
			return nil, fmt.Errorf("ipvs mode: %s: %w", fam, err)
		}
		rec, err := reconcile.New(reconcile.Options{
			IPVS: fc.IPVS, Link: fc.Link, IPSets: fc.IPSets, Family: fam,
			ExcludeCIDRs: cfg.ExcludeCIDRs, DrainTimeout: cfg.DrainTimeout, Clock: cfg.Clock,
		})
		if err != nil {
			return nil, fmt.Errorf("ipvs mode: %s: %w", fam, err)
		}
		m.families.Add(&family{
			fam: fam, base: fc.Desired,
			node: kernelmode.Node{Family: fam, Name: cfg.NodeName, NodePorts: cfg.NodePorts,
				NodeCIDR: cfg.NodeCIDRDetector, LocalAddrs: cfg.LocalAddresses},
			rec: rec, tables: fc.Tables, metrics: met.forFamily(fam), logger: cfg.Logger,
		})
	}
	interval := cfg.DrainInterval
	if interval == 0 {
		interval = DefaultDrainInterval
	}
	if interval > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		m.stop, m.drainDone = cancel, make(chan struct{})
		go m.drainLoop(ctx, interval)
	}
	return m, nil
}

// Name implements mode.Mode.
func (m *Mode) Name() mode.Name { return mode.IPVS }

// Sync implements mode.Mode. Each family is synced; a failing family does
// not stop the other. Then the sysctls the families want are written.
func (m *Mode) Sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	full := changes == nil || changes.Full
	return m.families.Locked(func(fams []*family) error {
		var sysctls []desired.Sysctl
		err := kernelmode.EachOf(fams, func(f *family) error {
			st, err := f.sync(ctx, snap, full)
			if st != nil {
				sysctls = append(sysctls, st.Sysctls...)
			}
			return err
		})
		return errors.Join(err, m.writeSysctls(sysctls, full))
	})
}

// Init implements mode.Initializer: the sysctls the mode needs, written
// before any sync (--init-only). IPv4's are the node's whatever the
// families.
func (m *Mode) Init(_ context.Context) error {
	return m.families.Locked(func(fams []*family) error {
		var sysctls []desired.Sysctl
		for _, f := range fams {
			sysctls = append(sysctls, desired.Sysctls(f.base)...)
		}
		return m.writeSysctls(sysctls, true)
	})
}

var _ mode.Initializer = (*Mode)(nil)

// writeSysctls writes each sysctl not written yet with its value (all of
// them on a full sync). A required one failing is an error, retried next
// sync; any other is a warning, retried at the next full sync.
func (m *Mode) writeSysctls(sysctls []desired.Sysctl, full bool) error {
	var errs []error
	for _, s := range sysctls {
		if v, done := m.sysctlsDone[s.Name]; done && v == s.Value && !full {
			continue
		}
		// Read first, as kube-proxy's EnsureSysctl does: a value already
		// right needs no write, which a read-only /proc/sys (a pod with
		// only CAP_NET_ADMIN after --init-only) would refuse.
		if cur, err := sysctl.ReadInt(m.sysctls, s.Name); err == nil && cur == s.Value {
			m.sysctlsDone[s.Name] = s.Value
			continue
		}
		err := sysctl.WriteInt(m.sysctls, s.Name, s.Value)
		switch {
		case err == nil:
			m.sysctlsDone[s.Name] = s.Value
		case requiredSysctl(s.Name):
			delete(m.sysctlsDone, s.Name)
			errs = append(errs, fmt.Errorf("setting sysctl %s=%d, which the IPVS mode needs: %w", s.Name, s.Value, err))
		default:
			m.sysctlsDone[s.Name] = s.Value
			m.logger.Info("Warning: could not set a sysctl the IPVS mode uses; carrying on without it",
				"sysctl", s.Name, "value", s.Value, "err", err)
		}
	}
	return errors.Join(errs...)
}

// Drain deletes draining TCP real servers that hold no connection any more
// or have drained long enough. The background drain calls it; so may tests.
func (m *Mode) Drain() error {
	return m.families.Each((*family).drain)
}

func (m *Mode) drainLoop(ctx context.Context, interval time.Duration) {
	defer close(m.drainDone)
	runner.Every(ctx, interval, func() {
		if err := m.Drain(); err != nil {
			m.logger.Error(err, "Draining IPVS real servers failed; the next sync re-reads the kernel")
		}
	})
}

// Close implements mode.Mode: it stops the background drain. Virtual
// servers, addresses, sets and rules stay, so a restart drops no traffic;
// --cleanup removes them.
func (m *Mode) Close() error {
	m.closeOnce.Do(func() {
		if m.stop != nil {
			m.stop()
			<-m.drainDone
		}
	})
	return nil
}
