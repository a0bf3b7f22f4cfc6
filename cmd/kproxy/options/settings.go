package options

import (
	"cmp"
	"time"

	"kproxy.dev/kproxy/lb/ports"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/nodeaddr"
)

// ModeSettings returns the part of c every proxy mode is built from.
func (c *Config) ModeSettings() contract.Settings {
	s := contract.Settings{
		NodeName: c.NodeName,
		NodePorts: nodeaddr.Policy{
			CIDRs: c.NodePortAddresses, Primary: c.NodePortPrimary, BindAddress: c.BindAddress,
		},
		ClusterCIDRs:           c.ClusterCIDRs,
		DetectLocalMode:        c.DetectLocalMode,
		PodBridgeInterface:     c.PodBridgeInterface,
		PodInterfaceNamePrefix: c.PodInterfaceNamePrefix,
		MasqueradeAll:          c.MasqueradeAll,
		MasqueradeBit:          int(c.MasqueradeBit),
		LocalhostNodePorts:     c.LocalhostNodePorts,
		IPTables:               contract.IPTablesSettings{Sync: syncPeriods(c.IPTablesMinSyncPeriod, c.IPTablesSyncPeriod)},
		NFTables: contract.NFTablesSettings{
			Sync:          syncPeriods(c.NFTablesMinSyncPeriod, c.NFTablesSyncPeriod),
			MasqueradeBit: int(c.NFTablesMasqueradeBit),
		},
		IPVS: contract.IPVSSettings{
			Sync:      syncPeriods(c.IPVSMinSyncPeriod, c.IPVSSyncPeriod),
			Scheduler: c.IPVSScheduler, ExcludeCIDRs: c.IPVSExcludeCIDRs, StrictARP: c.IPVSStrictARP,
			TCPTimeout: c.IPVSTCPTimeout, TCPFinTimeout: c.IPVSTCPFinTimeout, UDPTimeout: c.IPVSUDPTimeout,
		},
		Userspace: contract.UserspaceSettings{UDPIdleTimeout: c.UDPIdleTimeout, Portals: c.UserspacePortals,
			ServiceMetrics: c.UserspaceServiceMetrics},
	}
	if !c.PortRange.IsZero() {
		s.Userspace.PortRange = ports.Range{Lo: uint16(c.PortRange.Base), Hi: uint16(c.PortRange.Last())}
	}
	return s
}

// syncPeriods turns a configured minimum of 0, which the user means as "no
// limit", into the sync engine's -1 (its 0 means "default").
func syncPeriods(minSync, maxSync time.Duration) contract.SyncPeriods {
	minSync = cmp.Or(minSync, -1)
	return contract.SyncPeriods{Min: minSync, Max: maxSync}
}
