package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/redirect/modes/nftables/rules"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// FamilyConfig configures one IP family; a dual-stack node has two.
type FamilyConfig struct {
	// Rules is the configured part of the ruleset's configuration; the
	// node-dependent fields (NodePortAddresses, NodePortIPs, NodeIP,
	// Topology) are filled from each snapshot.
	Rules rules.Config
	// NFT is the family's table: knftables.New(family, TableName), or a
	// knftables.Fake in tests.
	NFT knftables.Interface
	// Lister reads the table's object names and the canary chain's rules;
	// nil lists through NFT (fine for the fake, slow with the real nft).
	Lister Lister
	// Netlink writes partial syncs of ordinary services straight over
	// nf_tables netlink rather than through nft (the real kernel only).
	Netlink bool
}

// Config configures the nftables mode.
type Config struct {
	Families []FamilyConfig
	// NodeName is this node's name (--hostname-override) for topology.
	NodeName string
	// NodePorts is --nodeport-addresses, resolved per family at each sync.
	NodePorts nodeaddr.Policy
	// LocalAddresses lists the node's interface addresses (for the
	// nodeport-ips set); nil means none.
	LocalAddresses func() ([]netip.Addr, error)
	// Registry receives the mode's metrics; nil registers nowhere.
	Registry prometheus.Registerer
	// NodeCIDRDetector: local traffic comes from the Node's pod CIDRs
	// (--detect-local-mode=NodeCIDR), read from each snapshot.
	NodeCIDRDetector bool
	// Now is the clock for deferred chain deletion; nil means time.Now.
	Now    func() time.Time
	Logger klog.Logger
}

// Mode is kube-proxy's nftables mode.
type Mode struct {
	families kernelmode.Families[*family]
	// gen reads nf_tables' generation (nil: unknown, every sync checks the
	// table). lastGen is the generation after the last sync, when every
	// step of it between the two reads was the mode's own (genKnown).
	gen      GenerationReader
	lastGen  uint32
	genKnown bool
}

var (
	_ mode.Mode       = (*Mode)(nil)
	_ mode.Backlogger = (*Mode)(nil)
)

// New checks cfg. Nothing is written until the first Sync.
func New(cfg Config) (*Mode, error) {
	if len(cfg.Families) == 0 {
		return nil, errors.New("nftables mode: no IP family configured")
	}
	met, err := newModeMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("nftables mode: %w", err)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	m := &Mode{}
	if g, ok := cfg.Families[0].Lister.(GenerationReader); ok {
		m.gen = g
	}
	for _, fc := range cfg.Families {
		if fc.NFT == nil {
			return nil, fmt.Errorf("nftables mode: no nftables interface for %s", fc.Rules.Family)
		}
		if err := fc.Rules.Validate(); err != nil {
			return nil, fmt.Errorf("nftables mode: %s: %w", fc.Rules.Family, err)
		}
		lister := fc.Lister
		if lister == nil {
			lister = knftLister{fc.NFT}
		}
		var fast *netlinkWriter
		if fc.Netlink {
			fast = newNetlinkWriter(fc.Rules.Family, TableName)
		}
		m.families.Add(&family{
			fast:   fast,
			fam:    fc.Rules.Family,
			nft:    fc.NFT,
			lister: lister,
			base:   fc.Rules,
			node: kernelmode.Node{Family: fc.Rules.Family, Name: cfg.NodeName, NodePorts: cfg.NodePorts,
				NodeCIDR: cfg.NodeCIDRDetector, LocalAddrs: cfg.LocalAddresses},
			metrics: met.forFamily(fc.Rules.Family),
			logger:  cfg.Logger.WithValues("ipFamily", fc.Rules.Family),
			now:     now,
			elems:   map[string]*elemState{},
			stale:   map[string]time.Time{},
		})
	}
	return m, nil
}

// Name implements mode.Mode.
func (m *Mode) Name() mode.Name { return mode.NFTables }

// Sync implements mode.Mode: each family is synced in one transaction; a
// failing family does not stop the other, and its next sync is a full one.
//
// Someone else's change to the table (a flushed map, deleted elements, a
// flushed or deleted table) is repaired by a full sync. To notice it at no
// cost while nobody else writes, the mode reads nf_tables' generation, which
// the kernel moves by one at every transaction it commits in the network
// namespace: when it is where the mode's last sync left it, nothing changed
// and nothing is checked; otherwise the families compare the table with
// what they wrote.
func (m *Mode) Sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	if changes == nil {
		changes = &servicemap.ChangeSet{Full: true}
	}
	return m.families.Locked(func(fams []*family) error {
		before, known := m.generation(ctx)
		check := !(known && m.genKnown && before == m.lastGen)
		commits := 0
		err := kernelmode.EachOf(fams, func(f *family) error {
			f.commits = 0
			err := f.sync(ctx, snap, changes, check)
			commits += f.commits
			return err
		})
		after, knownAfter := m.generation(ctx)
		// Only the mode's own transactions came between the two reads: the
		// table is as it wrote it. Anything else (a foreign write in
		// between, an empty transaction the kernel did not count, a
		// failure) leaves the next sync to check.
		m.lastGen = after
		m.genKnown = known && knownAfter && err == nil && after-before == uint32(commits)
		return err
	})
}

// generation reads nf_tables' generation; false when it is unknown.
func (m *Mode) generation(ctx context.Context) (uint32, bool) {
	if m.gen == nil {
		return 0, false
	}
	g, err := m.gen.Generation(ctx)
	if err != nil {
		m.families.List()[0].logger.Error(err, "Failed to read the nf_tables generation; checking the table")
		return 0, false
	}
	return g, true
}

// Backlog implements mode.Backlogger: the service ports of a large partial
// sync not written yet.
func (m *Mode) Backlog() int {
	n := 0
	_ = m.families.Locked(func(fams []*family) error {
		for _, f := range fams {
			n += len(f.backlog)
		}
		return nil
	})
	return n
}

// Close implements mode.Mode. The table stays: a restarting kproxy must
// not drop traffic; --cleanup removes it.
func (m *Mode) Close() error { return nil }
