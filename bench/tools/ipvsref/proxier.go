package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	"k8s.io/kubernetes/pkg/proxy/metaproxier"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	utilnode "k8s.io/kubernetes/pkg/util/node"
	netutils "k8s.io/utils/net"
)

// config is the part of kube-proxy's configuration the IPVS proxier reads.
type config struct {
	nodeName          string
	nodeIP            string // overrides the Node object's, like --bind-address
	scheduler         string
	masqueradeAll     bool
	masqueradeBit     int
	clusterCIDRs      []string
	nodePortAddresses []string
	ipv4Only          bool
}

// proxierSet is the proxier kube-proxy would run, with the health server
// its syncs report to.
type proxierSet struct {
	provider proxy.Provider
	health   *healthcheck.ProxyHealthServer
	families []v1.IPFamily
}

// newProxier builds kube-proxy v1.36's IPVS proxier as
// cmd/kube-proxy/app (server_linux.go createProxier) does: real iptables,
// IPVS, ipset and sysctl utilities, dual-stack when iptables and the
// kernel have both families.
func newProxier(ctx context.Context, cfg config, node *v1.Node) (*proxierSet, error) {
	ipvsHandle := utilipvs.New()
	ipsetRunner := utilipset.New()
	if err := ipvs.CanUseIPVSProxier(ctx, ipvsHandle, ipsetRunner, cfg.scheduler); err != nil {
		return nil, fmt.Errorf("can't use the IPVS proxier: %w", err)
	}
	nodeIPs, err := detectNodeIPs(node, cfg.nodeIP)
	if err != nil {
		return nil, err
	}
	ipts := utiliptables.NewBestEffort()
	if ipts[v1.IPv4Protocol] == nil {
		return nil, fmt.Errorf("iptables for IPv4 is not usable")
	}
	families := []v1.IPFamily{v1.IPv4Protocol}
	if !cfg.ipv4Only && ipts[v1.IPv6Protocol] != nil && kernelHasIPv6() {
		families = append(families, v1.IPv6Protocol)
	}
	// Not served: the proxier only needs somewhere to report its syncs.
	health := healthcheck.NewProxyHealthServer("127.0.0.1:0", time.Minute, nil)
	detectors := localDetectors(cfg.clusterCIDRs)

	build := func(fam v1.IPFamily) (*ipvs.Proxier, error) {
		p, err := ipvs.NewProxier(ctx, fam, ipts[fam], ipvsHandle, ipsetRunner, utilsysctl.New(),
			30*time.Second, 0, // --ipvs-sync-period, --ipvs-min-sync-period: kube-proxy's defaults
			nil, false, 0, 0, 0, // no exclude CIDRs, strict ARP or IPVS timeouts
			cfg.masqueradeAll, cfg.masqueradeBit, detectors[fam], cfg.nodeName, nodeIPs[fam],
			nil, health, cfg.scheduler, cfg.nodePortAddresses, false)
		if err != nil {
			return nil, fmt.Errorf("creating the %s IPVS proxier: %w", fam, err)
		}
		return p, nil
	}
	v4, err := build(v1.IPv4Protocol)
	if err != nil {
		return nil, err
	}
	set := &proxierSet{provider: v4, health: health, families: families}
	if len(families) == 2 {
		v6, err := build(v1.IPv6Protocol)
		if err != nil {
			return nil, err
		}
		set.provider = metaproxier.NewMetaProxier(v4, v6)
	}
	return set, nil
}

// detectNodeIPs follows kube-proxy: an explicit address first, then the
// Node object's addresses, else loopback.
func detectNodeIPs(node *v1.Node, override string) (map[v1.IPFamily]net.IP, error) {
	ips := map[v1.IPFamily]net.IP{
		v1.IPv4Protocol: net.IPv4(127, 0, 0, 1),
		v1.IPv6Protocol: net.IPv6loopback,
	}
	if node != nil {
		if hostIPs, err := utilnode.GetNodeHostIPs(node); err == nil {
			for _, ip := range hostIPs {
				ips[familyOf(ip)] = ip
			}
		}
	}
	if override != "" {
		ip := netutils.ParseIPSloppy(override)
		if ip == nil {
			return nil, fmt.Errorf("-node-ip %q is not an IP address", override)
		}
		ips[familyOf(ip)] = ip
	}
	return ips, nil
}

func familyOf(ip net.IP) v1.IPFamily {
	if netutils.IsIPv6(ip) {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

// localDetectors is kube-proxy's ClusterCIDR detect-local mode (its
// default): the first CIDR of each family, a no-op detector without one.
func localDetectors(clusterCIDRs []string) map[v1.IPFamily]proxyutil.LocalTrafficDetector {
	detectors := map[v1.IPFamily]proxyutil.LocalTrafficDetector{
		v1.IPv4Protocol: proxyutil.NewNoOpLocalDetector(),
		v1.IPv6Protocol: proxyutil.NewNoOpLocalDetector(),
	}
	for fam, cidrs := range proxyutil.MapCIDRsByIPFamily(clusterCIDRs) {
		detectors[fam] = proxyutil.NewDetectLocalByCIDR(cidrs[0].String())
	}
	return detectors
}

// kernelHasIPv6 is kube-proxy's check: IPv6 interfaces exist and IPv6 is
// not disabled.
func kernelHasIPv6() bool {
	if _, err := os.Stat("/proc/net/if_inet6"); err != nil {
		return false
	}
	disabled, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return err != nil || strings.TrimSpace(string(disabled)) != "1"
}
