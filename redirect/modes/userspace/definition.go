package userspace

import (
	"context"
	"fmt"

	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/lb/tcprelay"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/mode"
)

// Definition is the userspace mode for the registry: picked automatically
// where the iptables mode cannot run, with local portals where netfilter is
// missing altogether. Like kube-proxy's old userspace mode
// it uses the iptables sync periods for its portal rules.
func Definition() contract.Definition {
	return contract.Definition{
		Name:        mode.Userspace,
		Auto:        true,
		Missing:     Missing,
		SyncPeriods: func(s contract.Settings) contract.SyncPeriods { return s.IPTables.Sync },
		Conntrack:   conntrack.LocalRelays,
		Owned:       Owned,
		New:         build,
	}
}

// Missing lists what the userspace mode needs from the kernel that f
// lacks: nothing, as local portals need no netfilter (New says when the
// REDIRECT portals asked for cannot run).
func Missing(kernel.Features) []string { return nil }

func build(ctx context.Context, s contract.Settings, d contract.Deps) (mode.Mode, error) {
	// The detector tells which clients are this node's pods, whose external
	// traffic a Local policy short-circuits. The interface detectors match
	// where a packet came in, which a relay cannot see: say so rather than
	// ignore them silently.
	detector, err := s.LocalDetector()
	if err != nil {
		return nil, fmt.Errorf("userspace mode: %w", err)
	}
	if !detector.ByCIDR() {
		d.Logger.Info("Warning: the userspace mode cannot tell pods by their interface; with --detect-local-mode="+s.DetectLocalMode+
			" only the node's own addresses are short-circuited under externalTrafficPolicy Local", "detectLocalMode", s.DetectLocalMode)
	}
	// One relay socket per connection end: the default soft limit of
	// 1024 would cap the connections served.
	if limit, err := tcprelay.RaiseNoFileLimit(); err != nil {
		d.Logger.Info("Could not raise the open-file limit; carrying on", "err", err)
	} else {
		d.Logger.V(2).Info("Open-file limit", "soft", limit.NewSoft, "hard", limit.Hard)
	}
	m, err := New(ctx, Config{
		Features: d.Features, NodeName: s.NodeName, NodePorts: s.NodePorts,
		PortRange: s.Userspace.PortRange, UDPIdleTimeout: s.Userspace.UDPIdleTimeout, Registerer: d.Registry,
		Portals: s.Userspace.Portals, LocalhostNodePorts: s.LocalhostNodePorts, Sysctls: d.Sysctls,
		Detector: detector, ClusterCIDRs: s.ClusterCIDRs, ServiceMetrics: s.Userspace.ServiceMetrics,
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}
