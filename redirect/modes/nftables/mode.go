package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

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
	mu       sync.Mutex
	families []*family
}

var _ mode.Mode = (*Mode)(nil)

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
	for _, fc := range cfg.Families {
		if fc.NFT == nil {
			return nil, fmt.Errorf("nftables mode: no nftables interface for %s", fc.Rules.Family)
		}
		if _, err := rules.New(fc.Rules); err != nil {
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
		m.families = append(m.families, &family{
			fast:       fast,
			fam:        fc.Rules.Family,
			nft:        fc.NFT,
			lister:     lister,
			base:       fc.Rules,
			nodeName:   cfg.NodeName,
			nodePorts:  cfg.NodePorts,
			nodeCIDR:   cfg.NodeCIDRDetector,
			localAddrs: cfg.LocalAddresses,
			metrics:    met,
			logger:     cfg.Logger.WithValues("ipFamily", fc.Rules.Family),
			now:        now,
			applied:    map[servicemap.ServicePortName]*rules.Port{},
			elems:      map[string]*elemState{},
			stale:      map[string]time.Time{},
		})
	}
	return m, nil
}

// Name implements mode.Mode.
func (m *Mode) Name() mode.Name { return mode.NFTables }

// Sync implements mode.Mode: each family is synced in one transaction; a
// failing family does not stop the other, and its next sync is a full one.
func (m *Mode) Sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if changes == nil {
		changes = &servicemap.ChangeSet{Full: true}
	}
	var errs []error
	for _, f := range m.families {
		if err := f.sync(ctx, snap, changes); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close implements mode.Mode. The table stays: a restarting kproxy must
// not drop traffic; --cleanup removes it.
func (m *Mode) Close() error { return nil }
