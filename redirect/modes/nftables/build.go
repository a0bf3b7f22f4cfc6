package nftables

import (
	"context"
	"fmt"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/nftables/rules"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
)

// build sets up the mode for every family whose nf_tables the kernel probe
// found usable (IPv4 is required: Missing refuses the mode without it).
func build(ctx context.Context, s contract.Settings, d contract.Deps) (mode.Mode, error) {
	logger := d.Logger
	detector, err := s.LocalDetector()
	if err != nil {
		return nil, fmt.Errorf("nftables mode: %w", err)
	}
	var fams []FamilyConfig
	for _, fam := range ipfamily.All() {
		st := d.Features.NFTables.Family(fam)
		if !st.Present {
			if fam == ipfamily.IPv6 {
				logger.Info("IPv6 nftables is not usable; proxying IPv4 only", "problem", kernel.WithDetail("nftables", st.Detail))
			}
			continue
		}
		nftFam := knftables.IPv4Family
		if fam == ipfamily.IPv6 {
			nftFam = knftables.IPv6Family
		}
		nft, err := knftables.New(nftFam, TableName)
		if err != nil {
			return nil, fmt.Errorf("nftables mode: %s: %w", fam, err)
		}
		fams = append(fams, FamilyConfig{
			Rules: rules.Config{
				Family:        fam,
				MasqueradeBit: s.NFTables.MasqueradeBit,
				MasqueradeAll: s.MasqueradeAll,
				ClusterCIDRs:  s.ClusterCIDRsFor(detector, fam),

				BridgeInterface: detector.BridgeInterface, InterfaceNamePrefix: detector.InterfaceNamePrefix,
			},
			NFT:     nft,
			Lister:  NewNetlinkLister(fam, TableName),
			Netlink: true,
		})
	}
	if len(fams) == 0 {
		return nil, fmt.Errorf("nftables mode: no IP family has a usable nf_tables")
	}
	return New(Config{
		Families: fams, NodeName: s.NodeName, NodePorts: s.NodePorts, Registry: d.Registry, Logger: logger,
		LocalAddresses: kernel.InterfaceAddresses, NodeCIDRDetector: detector.NodeCIDR,
	})
}
