// Package contract is what a mode package fills in and the registry
// (redirect/modes) reads: a mode's Definition (kernel needs, sync periods,
// conntrack, owned objects, constructor), the node Settings and Deps it is
// built from, and Choose. The engine's side of the contract, the Mode
// interface the engine drives, stays in sync/mode: the engine never sees
// how a mode is chosen or built.
package contract

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/lb/ports"
	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/sysctl"
)

// Definition is one proxy mode as the rest of kproxy sees it: what it needs
// from the kernel, what it leaves there, how it is built. Every mode package
// exports one; the registry (redirect/modes) lists them.
type Definition struct {
	Name mode.Name
	// Auto: picked when no --proxy-mode is given, if it can run (the first
	// such in registry order).
	Auto bool
	// Missing lists, as phrases for an error message, what the mode needs
	// from the kernel that f lacks; empty means it can run.
	Missing func(f kernel.Features) []string
	// SyncPeriods returns the mode's minimum and maximum sync interval.
	SyncPeriods func(s Settings) SyncPeriods
	// Conntrack is how the mode's traffic passes conntrack, for the cleaner
	// of stale flows.
	Conntrack conntrack.Dataplane
	// Owned is what the mode creates in the kernel, for cleanup.
	Owned func() owned.Objects
	// New builds the mode. It may write the sysctls the mode needs; nothing
	// else touches the kernel before the first Sync.
	New func(ctx context.Context, s Settings, d Deps) (mode.Mode, error)
}

// SyncPeriods are a mode's sync intervals (--iptables-min-sync-period and
// --iptables-sync-period, or the IPVS ones).
type SyncPeriods struct {
	Min, Max time.Duration
}

// Settings are the node settings modes are built from: the resolved flags
// and --config file, grouped as KubeProxyConfiguration groups them.
type Settings struct {
	// NodeName is this node's name (--hostname-override), for topology.
	NodeName string
	// NodePorts is --nodeport-addresses, with --bind-address (a specific
	// one is the node's primary IP of its family).
	NodePorts nodeaddr.Policy
	// ClusterCIDRs is --cluster-cidr: traffic from outside it to service
	// IPs is masqueraded.
	ClusterCIDRs    []netip.Prefix
	DetectLocalMode string
	// PodBridgeInterface and PodInterfaceNamePrefix are
	// --pod-bridge-interface and --pod-interface-name-prefix, for the
	// BridgeInterface and InterfaceNamePrefix local-traffic detectors.
	PodBridgeInterface     string
	PodInterfaceNamePrefix string
	MasqueradeAll          bool
	MasqueradeBit          int
	// LocalhostNodePorts is --iptables-localhost-nodeports.
	LocalhostNodePorts bool

	IPTables  IPTablesSettings
	IPVS      IPVSSettings
	NFTables  NFTablesSettings
	Userspace UserspaceSettings
}

// IPTablesSettings are the iptables section of the configuration.
type IPTablesSettings struct {
	Sync SyncPeriods
}

// NFTablesSettings are the nftables section of the configuration.
type NFTablesSettings struct {
	Sync SyncPeriods
	// MasqueradeBit is nftables.masqueradeBit (--nftables-masquerade-bit):
	// kube-proxy's nftables mode takes its own, not --iptables-masquerade-bit.
	MasqueradeBit int
}

// IPVSSettings are the ipvs section of the configuration.
type IPVSSettings struct {
	Sync SyncPeriods
	// Scheduler is resolved: empty becomes "rr".
	Scheduler    string
	ExcludeCIDRs []netip.Prefix
	StrictARP    bool
	// TCPTimeout, TCPFinTimeout and UDPTimeout: 0 leaves the kernel's.
	TCPTimeout, TCPFinTimeout, UDPTimeout time.Duration
}

// UserspaceSettings are the userspace mode's (kube-proxy's old flags, and
// the portal kind).
type UserspaceSettings struct {
	// PortRange limits the proxy ports; the zero value lets the kernel pick.
	PortRange      ports.Range
	UDPIdleTimeout time.Duration
	// Portals is --userspace-portals; "" means PortalsAuto.
	Portals Portals
	// ServiceMetrics is --userspace-service-metrics: the relays' counters
	// per service port on /metrics.
	ServiceMetrics bool
}

// Portals is how the userspace mode steers Service traffic to its relays.
type Portals string

const (
	// PortalsAuto: REDIRECT portals in each IP family whose nat table can
	// REDIRECT and DNAT; in the others socket-lookup portals where the
	// kernel loads them, else local portals.
	PortalsAuto Portals = "auto"
	// PortalsRedirect: iptables REDIRECT/DNAT rules send service traffic to
	// proxy ports kproxy's relays listen on.
	PortalsRedirect Portals = "redirect"
	// PortalsLocal: service addresses are made local to the node with
	// routes, and the relays listen on them; no netfilter at all.
	PortalsLocal Portals = "local"
	// PortalsSKLookup: service addresses are made local with routes, and a
	// BPF socket-lookup program hands their service ports' traffic to one
	// relay socket per protocol and family, and drops their other ports;
	// no netfilter, no socket per service port.
	PortalsSKLookup Portals = "sklookup"
)

// AllPortals lists the values --userspace-portals accepts.
func AllPortals() []Portals {
	return []Portals{PortalsAuto, PortalsRedirect, PortalsLocal, PortalsSKLookup}
}

// Deps are what a mode is given besides its settings.
type Deps struct {
	// Features are the detected kernel features.
	Features kernel.Features
	// Registry receives the mode's metrics.
	Registry prometheus.Registerer
	// Sysctls are where the mode reads and writes the sysctls it needs.
	Sysctls sysctl.Sysctls
	Logger  klog.Logger
}

// LocalDetector is --detect-local-mode resolved: how a mode tells traffic
// from this node's pods from other traffic (kube-proxy's
// LocalTrafficDetector). The zero value is ClusterCIDR (Settings.ClusterCIDRs;
// none when empty).
type LocalDetector struct {
	// NodeCIDR: the Node object's spec.podCIDRs, read from each snapshot.
	NodeCIDR bool
	// BridgeInterface: traffic coming in on this interface.
	BridgeInterface string
	// InterfaceNamePrefix: traffic coming in on interfaces with this prefix.
	InterfaceNamePrefix string
}

// LocalDetector resolves DetectLocalMode; a mode kube-proxy does not know is
// an error naming the flag.
func (s Settings) LocalDetector() (LocalDetector, error) {
	switch s.DetectLocalMode {
	case "", "ClusterCIDR":
		return LocalDetector{}, nil
	case "NodeCIDR":
		return LocalDetector{NodeCIDR: true}, nil
	case "BridgeInterface":
		return LocalDetector{BridgeInterface: s.PodBridgeInterface}, nil
	case "InterfaceNamePrefix":
		return LocalDetector{InterfaceNamePrefix: s.PodInterfaceNamePrefix}, nil
	}
	return LocalDetector{}, fmt.Errorf("--detect-local-mode=%s is not one kube-proxy knows", s.DetectLocalMode)
}

// ClusterCIDRsFor returns the configured cluster CIDRs of fam under the
// ClusterCIDR detector, the one that takes them from the command line; nil
// under the others (NodeCIDR's come from each snapshot).
func (s Settings) ClusterCIDRsFor(d LocalDetector, fam ipfamily.Family) []netip.Prefix {
	if d != (LocalDetector{}) {
		return nil
	}
	return ipfamily.Prefixes(s.ClusterCIDRs, fam)
}

// ByCIDR says whether the detector matches source addresses (ClusterCIDR,
// NodeCIDR) rather than incoming interfaces.
func (d LocalDetector) ByCIDR() bool { return d.BridgeInterface == "" && d.InterfaceNamePrefix == "" }
