package ipvs

import (
	"context"
	"fmt"
	"net/netip"

	mobyipvs "github.com/moby/ipvs"

	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
)

// Definition is the IPVS mode for the registry. It is never picked
// automatically, as kube-proxy never picks it.
func Definition() contract.Definition {
	return contract.Definition{
		Name:        mode.IPVS,
		Missing:     Missing,
		SyncPeriods: func(s contract.Settings) contract.SyncPeriods { return s.IPVS.Sync },
		Conntrack:   conntrack.KernelNAT,
		Owned:       Owned,
		New:         build,
	}
}

// Missing lists what the IPVS mode needs from the kernel that f lacks.
func Missing(f kernel.Features) []string {
	var missing []string
	if !f.IPVS.Present {
		missing = append(missing, kernel.WithDetail("IPVS is absent", f.IPVS.Detail))
	}
	if !f.IPSet.Present {
		missing = append(missing, kernel.WithDetail("ipset is unusable", f.IPSet.Detail))
	}
	if !f.DummyLinks.Present {
		missing = append(missing, "dummy links are not supported")
	}
	return append(missing, f.NoBackend()...)
}

// build sets up the mode for every family whose iptables the kernel probe
// found usable (IPv4 is required: Missing refuses the mode without it, or
// without IPVS).
func build(ctx context.Context, s contract.Settings, d contract.Deps) (mode.Mode, error) {
	logger := d.Logger
	detector, err := s.LocalDetector()
	if err != nil {
		return nil, fmt.Errorf("ipvs mode: %w", err)
	}
	handle, err := mobyipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("opening IPVS: %w", err)
	}
	if err := ProbeScheduler(handle, s.IPVS.Scheduler); err != nil {
		handle.Close()
		return nil, err
	}
	if err := setTimeouts(handle, s.IPVS); err != nil {
		handle.Close()
		return nil, err
	}
	var fams []FamilyConfig
	for fam, ipt := range kernelmode.UsableIPTables(d.Features, logger) {
		dc := desired.Config{
			Family:        fam,
			Scheduler:     s.IPVS.Scheduler,
			MasqueradeAll: s.MasqueradeAll,
			MasqueradeBit: s.MasqueradeBit,
			RandomFully:   ipt.RandomFully,
			StrictARP:     s.IPVS.StrictARP,
			ClusterCIDRs:  s.ClusterCIDRsFor(detector, fam),

			BridgeInterface: detector.BridgeInterface, InterfaceNamePrefix: detector.InterfaceNamePrefix,
		}
		if ip, ok := s.NodePorts.PrimaryIP(fam, nil); ok && s.NodePorts.Primary {
			dc.NodeIPs = []netip.Addr{ip} // else the Node object's, at each sync
		}
		tables, err := NewTables(fam, d.Features.Backend, nil)
		if err != nil {
			handle.Close()
			return nil, fmt.Errorf("%s iptables: %w", fam, err)
		}
		fams = append(fams, FamilyConfig{
			Desired: dc, IPVS: handle, Link: handles.NewLink(fam == ipfamily.IPv6), IPSets: handles.NetlinkIPSets{}, Tables: tables,
		})
	}
	m, err := New(Config{
		Families: fams, NodeName: s.NodeName, NodePorts: s.NodePorts, ExcludeCIDRs: s.IPVS.ExcludeCIDRs,
		LocalAddresses:   func() ([]netip.Addr, error) { return handles.LocalAddressesExcept(handles.DummyLink) },
		NodeCIDRDetector: detector.NodeCIDR,
		Sysctls:          d.Sysctls, Registry: d.Registry, Logger: logger,
	})
	if err != nil {
		handle.Close()
		return nil, err
	}
	return m, nil
}

// setTimeouts applies --ipvs-tcp-timeout, --ipvs-tcpfin-timeout and
// --ipvs-udp-timeout as kube-proxy does: only when one is set, a zero
// leaving that timeout as it is.
func setTimeouts(h *mobyipvs.Handle, s contract.IPVSSettings) error {
	if s.TCPTimeout <= 0 && s.TCPFinTimeout <= 0 && s.UDPTimeout <= 0 {
		return nil
	}
	err := h.SetConfig(&mobyipvs.Config{TimeoutTCP: s.TCPTimeout, TimeoutTCPFin: s.TCPFinTimeout, TimeoutUDP: s.UDPTimeout})
	if err != nil {
		return fmt.Errorf("setting the IPVS timeouts (--ipvs-tcp-timeout, --ipvs-tcpfin-timeout, --ipvs-udp-timeout): %w", err)
	}
	return nil
}
