// Package options turns kproxy's command line and its optional
// KubeProxyConfiguration file into one validated, fully resolved Config.
//
// Precedence is kube-proxy's: built-in defaults, then either the flags the
// user set explicitly or, with --config, the file (plus the few flags
// kube-proxy still honours next to it).
package options

import (
	"net/netip"
	"time"

	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/mode"
)

// Config is everything kproxy needs to run, after defaulting, merging and
// validation. It holds plain resolved values only: nothing in it needs to be
// parsed again.
type Config struct {
	// ConfigFile is the --config file the values were read from ("" if none);
	// kube-proxy restarts when it changes, so the run loop may watch it.
	ConfigFile string
	// WriteConfigTo, Cleanup and InitOnly are one-shot actions, not settings.
	WriteConfigTo string
	Cleanup       bool
	InitOnly      bool
	// Warnings are what reading the configuration warned about (a leniently
	// decoded file, flags ignored next to --config); Complete logs them.
	Warnings []string

	// Where services come from: a cluster (Kubeconfig/Master, both may be
	// empty for in-cluster config) or a manifest file/dir (ServicesFile).
	Kubeconfig   string
	Master       string
	ServicesFile string
	ContentType  string
	QPS          float32
	Burst        int32
	// ConfigSyncPeriod is the informers' resync period; 0 disables resync.
	ConfigSyncPeriod time.Duration

	// NodeName is --hostname-override, else the OS hostname, lowercased.
	NodeName string
	// BindAddress is the node's primary IP as far as kproxy is concerned.
	BindAddress         netip.Addr
	BindAddressHardFail bool
	// HealthzBindAddress and MetricsBindAddress are "ip:port"; "" disables
	// the server.
	HealthzBindAddress          string
	MetricsBindAddress          string
	EnableProfiling             bool
	ShowHiddenMetricsForVersion string
	OOMScoreAdj                 int32

	// Mode is the proxy mode; "" means auto (iptables when usable, else
	// userspace).
	Mode mode.Name

	MasqueradeAll         bool
	MasqueradeBit         int32
	LocalhostNodePorts    bool
	IPTablesSyncPeriod    time.Duration
	IPTablesMinSyncPeriod time.Duration

	NFTablesSyncPeriod    time.Duration
	NFTablesMinSyncPeriod time.Duration
	NFTablesMasqueradeBit int32

	IPVSSyncPeriod    time.Duration
	IPVSMinSyncPeriod time.Duration
	// IPVSScheduler is resolved: an empty setting becomes "rr".
	IPVSScheduler     string
	IPVSExcludeCIDRs  []netip.Prefix
	IPVSStrictARP     bool
	IPVSTCPTimeout    time.Duration
	IPVSTCPFinTimeout time.Duration
	IPVSUDPTimeout    time.Duration

	// PortRange limits the host ports the userspace proxier may open; the
	// zero value means "any free port".
	PortRange PortRange
	// UDPIdleTimeout is how long the userspace proxier keeps an idle UDP
	// flow open.
	UDPIdleTimeout time.Duration
	// UserspacePortals is the userspace mode's portal kind; resolved, so
	// never empty.
	UserspacePortals contract.Portals
	// UserspaceServiceMetrics exports the relays' counters per service
	// port.
	UserspaceServiceMetrics bool

	// NodePortAddresses restricts NodePorts to node IPs in these prefixes;
	// empty means all local IPs. NodePortPrimary means "only the node's
	// primary IPs" and excludes a prefix list.
	NodePortAddresses []netip.Prefix
	NodePortPrimary   bool

	// DetectLocalMode is resolved: an empty setting becomes "ClusterCIDR".
	DetectLocalMode        string
	ClusterCIDRs           []netip.Prefix
	PodBridgeInterface     string
	PodInterfaceNamePrefix string

	Conntrack ConntrackConfig

	// FeatureGates is stored for the modes to consult; kproxy has no gates
	// of its own.
	FeatureGates map[string]bool
}

// ConntrackConfig holds the conntrack sysctls kproxy sets at start-up. Zero
// values mean "leave the kernel's value as it is".
type ConntrackConfig struct {
	MaxPerCore            int32
	Min                   int32
	TCPEstablishedTimeout time.Duration
	TCPCloseWaitTimeout   time.Duration
	TCPBeLiberal          bool
	UDPTimeout            time.Duration
	UDPStreamTimeout      time.Duration
}

// PortRange is an inclusive range of ports Base..Base+Size-1. Size 0 means
// no restriction.
type PortRange struct {
	Base int
	Size int
}

// Last returns the last port of a non-empty range.
func (r PortRange) Last() int { return r.Base + r.Size - 1 }

// IsZero reports whether the range places no restriction.
func (r PortRange) IsZero() bool { return r.Size == 0 }
