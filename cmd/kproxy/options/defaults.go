package options

import (
	"cmp"
	"net"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"
)

// The defaults below are kube-proxy's (pkg/proxy/apis/config/v1alpha1
// defaulting), so a file or command line means the same to both programs.
const (
	defaultBindAddress         = "0.0.0.0"
	defaultHealthzPort         = 10256
	defaultMetricsPort         = 10249
	defaultOOMScoreAdj         = -999
	defaultSyncPeriod          = 30 * time.Second
	defaultMinSyncPeriod       = 1 * time.Second
	defaultMasqueradeBit       = 14
	defaultConntrackMaxPerCore = 32 * 1024
	defaultConntrackMin        = 128 * 1024
	defaultTCPEstablished      = 24 * time.Hour
	defaultTCPCloseWait        = 1 * time.Hour
	defaultConfigSyncPeriod    = 15 * time.Minute
	defaultContentType         = "application/vnd.kubernetes.protobuf"
	defaultQPS                 = 5.0
	defaultBurst               = 10
	// defaultUDPIdleTimeout is the removed userspace proxier's default.
	defaultUDPIdleTimeout = 250 * time.Millisecond
	// defaultIPVSScheduler is what the ipvs proxier uses for an empty setting.
	defaultIPVSScheduler   = "rr"
	defaultDetectLocalMode = "ClusterCIDR"
	// cAdvisor's defaults for the two flags kube-proxy takes from it.
	defaultBootIDFile    = "/proc/sys/kernel/random/boot_id"
	defaultMachineIDFile = "/etc/machine-id,/var/lib/dbus/machine-id"
)

// NewDefaultFileConfiguration returns a configuration holding only defaults.
func NewDefaultFileConfiguration() *FileConfiguration {
	fc := &FileConfiguration{}
	SetDefaults(fc)
	return fc
}

// SetDefaults fills every unset (zero) field of fc with its default, the way
// kube-proxy defaults a decoded file. It is idempotent.
func SetDefaults(fc *FileConfiguration) {
	c := &fc.KubeProxyConfiguration
	c.BindAddress = cmp.Or(c.BindAddress, defaultBindAddress)
	healthzHost, metricsHost := "0.0.0.0", "127.0.0.1"
	if ip := netutils.ParseIPSloppy(c.BindAddress); ip != nil && ip.To4() == nil {
		healthzHost, metricsHost = "::", "::1"
	}
	if c.HealthzBindAddress == "" {
		c.HealthzBindAddress = net.JoinHostPort(healthzHost, strconv.Itoa(defaultHealthzPort))
	} else {
		c.HealthzBindAddress = appendPortIfNeeded(c.HealthzBindAddress, defaultHealthzPort)
	}
	if c.MetricsBindAddress == "" {
		c.MetricsBindAddress = net.JoinHostPort(metricsHost, strconv.Itoa(defaultMetricsPort))
	} else {
		c.MetricsBindAddress = appendPortIfNeeded(c.MetricsBindAddress, defaultMetricsPort)
	}
	if c.OOMScoreAdj == nil {
		c.OOMScoreAdj = ptrTo[int32](defaultOOMScoreAdj)
	}

	defaultDuration(&c.IPTables.SyncPeriod, defaultSyncPeriod)
	defaultDuration(&c.IPTables.MinSyncPeriod, defaultMinSyncPeriod)
	if c.IPTables.LocalhostNodePorts == nil {
		c.IPTables.LocalhostNodePorts = ptrTo(true)
	}
	if c.IPTables.MasqueradeBit == nil {
		c.IPTables.MasqueradeBit = ptrTo[int32](defaultMasqueradeBit)
	}
	// kube-proxy leaves ipvs.minSyncPeriod at 0 (sync on every change).
	defaultDuration(&c.IPVS.SyncPeriod, defaultSyncPeriod)
	defaultDuration(&c.NFTables.SyncPeriod, defaultSyncPeriod)
	defaultDuration(&c.NFTables.MinSyncPeriod, defaultMinSyncPeriod)
	if c.NFTables.MasqueradeBit == nil {
		c.NFTables.MasqueradeBit = ptrTo[int32](defaultMasqueradeBit)
	}

	if c.Conntrack.MaxPerCore == nil {
		c.Conntrack.MaxPerCore = ptrTo[int32](defaultConntrackMaxPerCore)
	}
	if c.Conntrack.Min == nil {
		c.Conntrack.Min = ptrTo[int32](defaultConntrackMin)
	}
	if c.Conntrack.TCPEstablishedTimeout == nil {
		c.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: defaultTCPEstablished}
	}
	if c.Conntrack.TCPCloseWaitTimeout == nil {
		c.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: defaultTCPCloseWait}
	}
	defaultDuration(&c.ConfigSyncPeriod, defaultConfigSyncPeriod)

	c.ClientConnection.ContentType = cmp.Or(c.ClientConnection.ContentType, defaultContentType)
	c.ClientConnection.QPS = cmp.Or(c.ClientConnection.QPS, defaultQPS)
	c.ClientConnection.Burst = cmp.Or(c.ClientConnection.Burst, defaultBurst)
	if c.FeatureGates == nil {
		c.FeatureGates = map[string]bool{}
	}
	logsapi.SetRecommendedLoggingConfiguration(&c.Logging)
	// fc.UDPIdleTimeout stays unset: resolve defaults it (see the field).
}

func defaultDuration(d *metav1.Duration, def time.Duration) {
	d.Duration = cmp.Or(d.Duration, def)
}

// appendPortIfNeeded turns a bare IP into ip:port; anything else (already
// host:port, or invalid and left for validation to report) is unchanged.
func appendPortIfNeeded(addr string, port int) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if netutils.ParseIPSloppy(addr) == nil {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

func ptrTo[T any](v T) *T { return &v }
