package iptables

import (
	"context"
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/redirect/netfilter/nfacct"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/nodeaddr"
)

// Definition is the iptables mode for the registry.
func Definition() contract.Definition {
	return contract.Definition{
		Name:        mode.IPTables,
		Auto:        true,
		Missing:     Missing,
		SyncPeriods: func(s contract.Settings) contract.SyncPeriods { return s.IPTables.Sync },
		Conntrack:   conntrack.KernelNAT,
		Owned:       Owned,
		New:         build,
	}
}

// Missing lists what the iptables mode needs from the kernel that f lacks:
// an iptables backend whose nat table can DNAT, in IPv4 at least.
func Missing(f kernel.Features) []string {
	if nb := f.NoBackend(); nb != nil {
		return nb
	}
	if ipt := f.Chosen(ipfamily.IPv4); !ipt.DNAT {
		return []string{fmt.Sprintf("the nat table of iptables-%s cannot load the DNAT target (%s)", f.Backend, ipt.Problem)}
	}
	return nil
}

// build sets up the mode for every family whose iptables the kernel probe
// found usable (IPv4 is required: Missing refuses the mode without it).
func build(ctx context.Context, s contract.Settings, d contract.Deps) (mode.Mode, error) {
	logger := d.Logger
	beLiberal, err := d.Sysctls.Read("net/netfilter/nf_conntrack_tcp_be_liberal")
	if err != nil {
		logger.V(2).Info("Could not read a sysctl; taking it as unset", "err", err)
	}
	detector, err := s.LocalDetector()
	if err != nil {
		return nil, fmt.Errorf("iptables mode: %w", err)
	}
	counters := ensureNFAcct(logger, nfacct.Netlink{})
	var fams []FamilyConfig
	for fam, ipt := range kernelmode.UsableIPTables(d.Features, logger) {
		rc := rules.Config{
			Family:        fam,
			MasqueradeBit: s.MasqueradeBit,
			MasqueradeAll: s.MasqueradeAll,
			RandomFully:   ipt.RandomFully,

			BridgeInterface: detector.BridgeInterface, InterfaceNamePrefix: detector.InterfaceNamePrefix,

			LocalhostNodePorts:    s.LocalhostNodePorts && fam == ipfamily.IPv4,
			ConntrackTCPBeLiberal: beLiberal == "1",
			NFAcct:                counters,
			ClusterCIDRs:          s.ClusterCIDRsFor(detector, fam),
		}
		if ip, ok := s.NodePorts.PrimaryIP(fam, nil); ok && s.NodePorts.Primary {
			rc.NodeIPs = []netip.Addr{ip} // else the Node object's, at each sync
		}
		tables, err := NewKernelTables(fam, d.Features.Backend)
		if err != nil {
			return nil, fmt.Errorf("%s iptables: %w", fam, err)
		}
		fams = append(fams, FamilyConfig{
			Rules: rc, Tables: tables, MaxChainsPerRestore: DefaultMaxChains(d.Features.Backend),
		})
	}
	// "primary" never admits loopback: its prefixes are the node's IPs.
	if s.LocalhostNodePorts && !s.NodePorts.Primary && nodeaddr.AdmitsIPv4Loopback(ipfamily.Prefixes(s.NodePorts.CIDRs, ipfamily.IPv4)) {
		// NodePorts on 127.0.0.1 are DNATed to other hosts, which the
		// kernel only routes with route_localnet, as kube-proxy sets it.
		// Read first, as kube-proxy's EnsureSysctl does: a value already
		// right needs no write (a read-only /proc/sys after --init-only).
		if cur, err := d.Sysctls.Read("net/ipv4/conf/all/route_localnet"); err == nil && cur == "1" {
			logger.V(2).Info("route_localnet is already 1")
		} else if err := d.Sysctls.Write("net/ipv4/conf/all/route_localnet", "1"); err != nil {
			logger.Error(err, "Could not set net.ipv4.conf.all.route_localnet=1: NodePorts will not answer on 127.0.0.1 "+
				"(pass --iptables-localhost-nodeports=false to silence this)")
		}
	}
	if d.Registry != nil {
		if err := d.Registry.Register(newNFAcctCollector(logger, nfacct.Netlink{}, counters)); err != nil {
			return nil, fmt.Errorf("iptables mode: registering the nfacct metrics: %w", err)
		}
	}
	m, err := New(Config{
		Families: fams, NodeName: s.NodeName, NodePorts: s.NodePorts, Registry: d.Registry, Logger: logger,
		LocalAddresses: kernel.InterfaceAddresses, NodeCIDRDetector: detector.NodeCIDR,
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}
