package userspace

import (
	"context"
	"fmt"

	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/lb/tcprelay"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
)

// Definition is the userspace mode for the registry: picked automatically
// where the iptables mode cannot run. Like kube-proxy's old userspace mode
// it uses the iptables sync periods for its portal rules.
func Definition() mode.Definition {
	return mode.Definition{
		Name:        mode.Userspace,
		Auto:        true,
		Missing:     Missing,
		SyncPeriods: func(s mode.Settings) mode.SyncPeriods { return s.IPTables.Sync },
		Conntrack:   conntrack.LocalRelays,
		Owned:       Owned,
		New:         build,
	}
}

// Missing lists what the userspace mode needs from the kernel that f
// lacks: an iptables backend whose nat table can REDIRECT or DNAT.
func Missing(f kernel.Features) []string {
	if nb := f.NoBackend(); nb != nil {
		return nb
	}
	if ipt := f.Chosen(ipfamily.IPv4); !ipt.Redirect && !ipt.DNAT {
		return []string{fmt.Sprintf("the nat table of iptables-%s can load neither the REDIRECT nor the DNAT target (%s)", f.Backend, ipt.Problem)}
	}
	return nil
}

func build(ctx context.Context, s mode.Settings, d mode.Deps) (mode.Mode, error) {
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
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}
