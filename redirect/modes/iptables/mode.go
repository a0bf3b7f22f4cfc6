package iptables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Tables is the mode's access to one family's iptables. The kernel
// implementation runs iptables-restore/-save; tests use fakeiptables, which
// fails the way the tools do.
type Tables interface {
	// Restore runs one iptables-restore --noflush transaction. A failure
	// names the payload line the tool blamed.
	Restore(ctx context.Context, payload []byte) error
	// Save returns an iptables-save dump of one table.
	Save(ctx context.Context, table rules.Table) (string, error)
	// ChainExists says whether a chain exists in a table.
	ChainExists(ctx context.Context, table rules.Table, chain string) (bool, error)
	// ListChain returns one chain's rules as iptables -S prints them
	// ("-A CHAIN ..." lines).
	ListChain(ctx context.Context, table rules.Table, chain string) ([]string, error)
}

// FamilyConfig configures one IP family; a dual-stack node has two.
type FamilyConfig struct {
	// Rules is the rule model's configuration; its Topology, and NodeIPs
	// when empty, are filled from each snapshot.
	Rules  rules.Config
	Tables Tables
	// MaxChainsPerRestore splits full syncs into transactions of at most
	// this many chains; 0 means one transaction. See DefaultMaxChains.
	MaxChainsPerRestore int
}

// DefaultMaxChains returns the transaction size for a backend. nf_tables
// restores with --noflush slow down with the square of the chains declared
// in one transaction. Measured with iptables-nft-restore 1.8.9, 5,000
// services of 10 endpoints (55,000 chains, 215,000 lines) into an empty
// namespace: one transaction 276 s; transactions of ~5,000 chains 9.1 s,
// ~2,750 6.1 s, ~1,000 5.1 s, ~500 4.8 s, ~250 5.1 s. The legacy backend
// rewrites the whole table per transaction (one: 1.9 s), so it gets one.
func DefaultMaxChains(b kernel.Backend) int {
	if b == kernel.NFT {
		return 1000
	}
	return 0
}

// Config configures the iptables mode.
type Config struct {
	Families []FamilyConfig
	// NodeName is this node's name (--hostname-override) for topology.
	NodeName string
	// NodePorts is --nodeport-addresses, resolved per family at each sync
	// ("primary" needs the Node object).
	NodePorts nodeaddr.Policy
	// LocalAddresses lists the node's interface addresses, read on every
	// sync when --nodeport-addresses is set (kube-proxy writes one
	// NodePort jump per matching address).
	LocalAddresses func() ([]netip.Addr, error)
	// NodeCIDRDetector is --detect-local-mode=NodeCIDR: each family's
	// ClusterCIDRs become the Node object's pod CIDRs of the family.
	NodeCIDRDetector bool
	// Registry receives the mode's metrics; nil registers nowhere.
	Registry prometheus.Registerer
	// NewModel builds a rule model; nil means rules.New.
	NewModel func(rules.Config) (RuleModel, error)
	Logger   klog.Logger
}

// Mode is kube-proxy's iptables mode.
type Mode struct {
	families kernelmode.Families[*family]
}

var _ mode.Mode = (*Mode)(nil)

// New checks cfg. Nothing is written until the first Sync.
func New(cfg Config) (*Mode, error) {
	if len(cfg.Families) == 0 {
		return nil, errors.New("iptables mode: no IP family configured")
	}
	newModel := cfg.NewModel
	if newModel == nil {
		newModel = func(c rules.Config) (RuleModel, error) { return rules.New(c) }
	}
	met, err := newModeMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("iptables mode: %w", err)
	}
	m := &Mode{}
	for _, fc := range cfg.Families {
		if fc.Tables == nil {
			return nil, fmt.Errorf("iptables mode: no tables for %s", fc.Rules.Family)
		}
		if _, err := newModel(fc.Rules); err != nil {
			return nil, fmt.Errorf("iptables mode: %s: %w", fc.Rules.Family, err)
		}
		fm := met.forFamily(fc.Rules.Family)
		m.families.Add(&family{
			fam:      fc.Rules.Family,
			tables:   countingTables{Tables: fc.Tables, met: fm},
			newModel: newModel,
			base:     fc.Rules,
			node: kernelmode.Node{Family: fc.Rules.Family, Name: cfg.NodeName, NodePorts: cfg.NodePorts,
				NodeCIDR: cfg.NodeCIDRDetector, LocalAddrs: cfg.LocalAddresses},
			maxChains: fc.MaxChainsPerRestore,
			metrics:   fm,
			logger:    cfg.Logger,
		})
	}
	return m, nil
}

// Name implements mode.Mode.
func (m *Mode) Name() mode.Name { return mode.IPTables }

// Sync implements mode.Mode: each family is synced; a failing family does
// not stop the other, and its next sync is a full one.
func (m *Mode) Sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	return m.families.Each(func(f *family) error { return f.sync(ctx, snap, changes) })
}

// Close implements mode.Mode. The rules stay: a restarting kproxy must not
// drop traffic; --cleanup removes them.
func (m *Mode) Close() error { return nil }
