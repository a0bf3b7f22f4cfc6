package app

import (
	"context"
	"fmt"
	"net/netip"

	mobyipvs "github.com/moby/ipvs"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/redirect/ipvs"
	"kproxy.dev/kproxy/redirect/ipvs/desired"
	"kproxy.dev/kproxy/redirect/ipvs/handles"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/metrics"
)

// newIPVSMode sets up kube-proxy's IPVS mode for every family whose
// iptables the kernel probe found usable (IPv4 is required: Choose already
// refused the mode without it, or without IPVS).
func newIPVSMode(ctx context.Context, cfg *options.Config, features kernel.Features, m *metrics.Metrics) (*ipvs.Mode, error) {
	logger := klog.FromContext(ctx)
	handle, err := mobyipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("opening IPVS: %w", err)
	}
	if err := ipvs.ProbeScheduler(handle, cfg.IPVSScheduler); err != nil {
		handle.Close()
		return nil, err
	}
	if err := setIPVSTimeouts(handle, cfg); err != nil {
		handle.Close()
		return nil, err
	}
	var fams []ipvs.FamilyConfig
	for _, fam := range []kernel.Family{kernel.IPv4, kernel.IPv6} {
		ipt := features.Family(fam).Get(features.Backend)
		if !ipt.Usable {
			if fam == kernel.IPv6 {
				logger.Info("IPv6 iptables is not usable; proxying IPv4 only", "backend", features.Backend, "problem", ipt.Problem)
			}
			continue
		}
		dc := desired.Config{
			Family:        fam,
			Scheduler:     cfg.IPVSScheduler,
			MasqueradeAll: cfg.MasqueradeAll,
			MasqueradeBit: int(cfg.MasqueradeBit),
			ClusterCIDRs:  ofFamily(cfg.ClusterCIDRs, fam),
			RandomFully:   ipt.RandomFully,
			StrictARP:     cfg.IPVSStrictARP,
		}
		if cfg.NodePortPrimary {
			if cfg.BindAddress.IsValid() && !cfg.BindAddress.IsUnspecified() && kernelFamily(cfg.BindAddress) == fam {
				dc.NodeIPs = []netip.Addr{cfg.BindAddress}
				dc.NodePortAddresses = []netip.Prefix{netip.PrefixFrom(cfg.BindAddress, cfg.BindAddress.BitLen())}
			}
		} else {
			dc.NodePortAddresses = ofFamily(cfg.NodePortAddresses, fam)
		}
		tables, err := ipvs.NewTables(fam, features.Backend, nil, nil)
		if err != nil {
			handle.Close()
			return nil, fmt.Errorf("%s iptables: %w", fam, err)
		}
		fams = append(fams, ipvs.FamilyConfig{
			Desired: dc, IPVS: handle, Link: handles.NewLink(fam == kernel.IPv6), IPSets: handles.NetlinkIPSets{}, Tables: tables,
		})
	}
	mode, err := ipvs.New(ipvs.Config{
		Families: fams, NodeName: cfg.NodeName, ExcludeCIDRs: cfg.IPVSExcludeCIDRs,
		LocalAddresses: func() ([]netip.Addr, error) { return handles.LocalAddressesExcept(handles.DummyLink) },
		Registry:       m.Registry(), Logger: logger,
	})
	if err != nil {
		handle.Close()
		return nil, err
	}
	return mode, nil
}

// setIPVSTimeouts applies --ipvs-tcp-timeout, --ipvs-tcpfin-timeout and
// --ipvs-udp-timeout as kube-proxy does: only when one is set, a zero
// leaving that timeout as it is.
func setIPVSTimeouts(h *mobyipvs.Handle, cfg *options.Config) error {
	if cfg.IPVSTCPTimeout <= 0 && cfg.IPVSTCPFinTimeout <= 0 && cfg.IPVSUDPTimeout <= 0 {
		return nil
	}
	err := h.SetConfig(&mobyipvs.Config{
		TimeoutTCP: cfg.IPVSTCPTimeout, TimeoutTCPFin: cfg.IPVSTCPFinTimeout, TimeoutUDP: cfg.IPVSUDPTimeout,
	})
	if err != nil {
		return fmt.Errorf("setting the IPVS timeouts (--ipvs-tcp-timeout, --ipvs-tcpfin-timeout, --ipvs-udp-timeout): %w", err)
	}
	return nil
}
