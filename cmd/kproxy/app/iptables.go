package app

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/redirect/iptables"
	"kproxy.dev/kproxy/redirect/iptables/rules"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/metrics"
)

// newIPTablesMode sets up kube-proxy's iptables mode for every family whose
// iptables the kernel probe found usable (IPv4 is required: Choose already
// refused the mode without it).
func newIPTablesMode(ctx context.Context, cfg *options.Config, features kernel.Features, m *metrics.Metrics) (*iptables.Mode, error) {
	logger := klog.FromContext(ctx)
	beLiberal := readSysctl(logger, "net/netfilter/nf_conntrack_tcp_be_liberal") == "1"
	if cfg.DetectLocalMode != "" && cfg.DetectLocalMode != "ClusterCIDR" {
		logger.Info("Warning: this --detect-local-mode is not supported by kproxy's iptables mode; "+
			"traffic is treated as with no local-traffic detector (only --cluster-cidr is)", "detectLocalMode", cfg.DetectLocalMode)
	}
	var fams []iptables.FamilyConfig
	for _, fam := range []kernel.Family{kernel.IPv4, kernel.IPv6} {
		ipt := features.Family(fam).Get(features.Backend)
		if !ipt.Usable {
			if fam == kernel.IPv6 {
				logger.Info("IPv6 iptables is not usable; proxying IPv4 only", "backend", features.Backend, "problem", ipt.Problem)
			}
			continue
		}
		rc := rules.Config{
			Family:        fam,
			MasqueradeBit: int(cfg.MasqueradeBit),
			MasqueradeAll: cfg.MasqueradeAll,
			ClusterCIDRs:  ofFamily(cfg.ClusterCIDRs, fam),
			RandomFully:   ipt.RandomFully,

			LocalhostNodePorts:    cfg.LocalhostNodePorts && fam == kernel.IPv4,
			ConntrackTCPBeLiberal: beLiberal,
		}
		if cfg.NodePortPrimary {
			if cfg.BindAddress.IsValid() && !cfg.BindAddress.IsUnspecified() && kernelFamily(cfg.BindAddress) == fam {
				rc.NodeIPs = []netip.Addr{cfg.BindAddress}
				rc.NodePortAddresses = []netip.Prefix{netip.PrefixFrom(cfg.BindAddress, cfg.BindAddress.BitLen())}
			}
		} else {
			rc.NodePortAddresses = ofFamily(cfg.NodePortAddresses, fam)
		}
		tables, err := iptables.NewKernelTables(fam, features.Backend)
		if err != nil {
			return nil, fmt.Errorf("%s iptables: %w", fam, err)
		}
		fams = append(fams, iptables.FamilyConfig{
			Rules: rc, Tables: tables, MaxChainsPerRestore: iptables.DefaultMaxChains(features.Backend),
		})
	}
	if cfg.LocalhostNodePorts && localhostNodePortsPossible(cfg) {
		// NodePorts on 127.0.0.1 are DNATed to other hosts, which the
		// kernel only routes with route_localnet, as kube-proxy sets it.
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/route_localnet", []byte("1"), 0); err != nil {
			logger.Error(err, "Could not set net.ipv4.conf.all.route_localnet=1: NodePorts will not answer on 127.0.0.1 "+
				"(pass --iptables-localhost-nodeports=false to silence this)")
		}
	}
	return iptables.New(iptables.Config{
		Families: fams, NodeName: cfg.NodeName, Registry: m.Registry(), Logger: logger,
		LocalAddresses: kernel.InterfaceAddresses,
	})
}

func kernelFamily(a netip.Addr) kernel.Family {
	if a.Unmap().Is4() {
		return kernel.IPv4
	}
	return kernel.IPv6
}

func ofFamily(ps []netip.Prefix, fam kernel.Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if kernelFamily(p.Addr()) == fam {
			out = append(out, p)
		}
	}
	return out
}

// nodePortListenAddresses is where health-check node ports listen: like
// NodePorts, on the addresses --nodeport-addresses selects (the primary IP
// for "primary"), or everywhere when unset.
func nodePortListenAddresses(cfg *options.Config) []netip.Addr {
	if cfg.NodePortPrimary {
		if cfg.BindAddress.IsValid() && !cfg.BindAddress.IsUnspecified() {
			return []netip.Addr{cfg.BindAddress}
		}
		return nil
	}
	if len(cfg.NodePortAddresses) == 0 {
		return nil
	}
	addrs, err := kernel.InterfaceAddresses()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ip := range addrs {
		for _, p := range cfg.NodePortAddresses {
			if p.Contains(ip) {
				out = append(out, ip)
				break
			}
		}
	}
	return out
}

// localhostNodePortsPossible says whether --nodeport-addresses admits
// 127.0.0.1 (unset admits every address).
func localhostNodePortsPossible(cfg *options.Config) bool {
	if cfg.NodePortPrimary {
		return false
	}
	if len(cfg.NodePortAddresses) == 0 {
		return true
	}
	for _, p := range cfg.NodePortAddresses {
		if p.Contains(netip.MustParseAddr("127.0.0.1")) {
			return true
		}
	}
	return false
}

// readSysctl returns a sysctl's value, "" when it cannot be read (logged).
func readSysctl(logger klog.Logger, name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		logger.V(2).Info("Could not read a sysctl", "sysctl", name, "err", err)
		return ""
	}
	return strings.TrimSpace(string(b))
}
