package options

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netutils "k8s.io/utils/net"

	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/mode"
)

// ipvsSchedulers are the schedulers the kernel's IPVS implements.
func ipvsSchedulers() []string {
	return []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh"}
}

// detectLocalModes lists the non-empty --detect-local-mode values.
func detectLocalModes() []string {
	return []string{"ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"}
}

func proxyModes() []mode.Name {
	return []mode.Name{mode.Userspace, mode.IPTables, mode.IPVS, mode.NFTables}
}

// isMajorMinor reports whether v looks like "1.35".
func isMajorMinor(v string) bool {
	major, minor, ok := strings.Cut(v, ".")
	return ok && isDigits(major) && isDigits(minor)
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// setting names one configurable value both ways a user can give it.
type setting struct {
	flag  string // without the leading dashes
	field string // JSON path in the --config file
}

// origin says where the effective value of each setting came from, so an
// error can point at the flag or at the file field the user must fix.
type origin struct {
	file    string
	changed func(flag string) bool
}

func (o origin) describe(s setting) string {
	if o.file == "" || o.changed(s.flag) {
		return "--" + s.flag
	}
	return fmt.Sprintf("%s in config file %s (flag --%s)", s.field, o.file, s.flag)
}

// resolver validates an effective FileConfiguration while converting it to
// a Config, collecting every problem instead of stopping at the first.
type resolver struct {
	from origin
	errs []error
}

func (r *resolver) invalid(s setting, value any, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("invalid value %q for %s: %s",
		fmt.Sprint(value), r.from.describe(s), fmt.Sprintf(format, args...)))
}

// resolve checks fc and returns the Config it describes and every problem
// found; the Config must not be used when there are problems.
func resolve(fc *FileConfiguration, from origin) (*Config, []error) {
	r := &resolver{from: from}
	c := &fc.KubeProxyConfiguration
	cfg := &Config{
		Kubeconfig:                  c.ClientConnection.Kubeconfig,
		ServicesFile:                fc.ServicesFile,
		ContentType:                 c.ClientConnection.ContentType,
		QPS:                         c.ClientConnection.QPS,
		Burst:                       c.ClientConnection.Burst,
		ConfigSyncPeriod:            c.ConfigSyncPeriod.Duration,
		BindAddressHardFail:         c.BindAddressHardFail,
		EnableProfiling:             c.EnableProfiling,
		ShowHiddenMetricsForVersion: c.ShowHiddenMetricsForVersion,
		OOMScoreAdj:                 deref(c.OOMScoreAdj),
		Mode:                        mode.Name(c.Mode),
		MasqueradeAll:               c.IPTables.MasqueradeAll,
		MasqueradeBit:               deref(c.IPTables.MasqueradeBit),
		LocalhostNodePorts:          deref(c.IPTables.LocalhostNodePorts),
		IPTablesSyncPeriod:          c.IPTables.SyncPeriod.Duration,
		IPTablesMinSyncPeriod:       c.IPTables.MinSyncPeriod.Duration,
		NFTablesSyncPeriod:          c.NFTables.SyncPeriod.Duration,
		NFTablesMinSyncPeriod:       c.NFTables.MinSyncPeriod.Duration,
		NFTablesMasqueradeBit:       deref(c.NFTables.MasqueradeBit),
		IPVSSyncPeriod:              c.IPVS.SyncPeriod.Duration,
		IPVSMinSyncPeriod:           c.IPVS.MinSyncPeriod.Duration,
		IPVSScheduler:               c.IPVS.Scheduler,
		IPVSStrictARP:               c.IPVS.StrictARP,
		IPVSTCPTimeout:              c.IPVS.TCPTimeout.Duration,
		IPVSTCPFinTimeout:           c.IPVS.TCPFinTimeout.Duration,
		IPVSUDPTimeout:              c.IPVS.UDPTimeout.Duration,
		UDPIdleTimeout:              fc.UDPIdleTimeout.Duration,
		UserspacePortals:            contract.Portals(fc.UserspacePortals),
		UserspaceServiceMetrics:     fc.UserspaceServiceMetrics,
		DetectLocalMode:             string(c.DetectLocalMode),
		PodBridgeInterface:          c.DetectLocal.BridgeInterface,
		PodInterfaceNamePrefix:      c.DetectLocal.InterfaceNamePrefix,
		Conntrack: ConntrackConfig{
			MaxPerCore:            deref(c.Conntrack.MaxPerCore),
			Min:                   deref(c.Conntrack.Min),
			TCPEstablishedTimeout: derefDuration(c.Conntrack.TCPEstablishedTimeout),
			TCPCloseWaitTimeout:   derefDuration(c.Conntrack.TCPCloseWaitTimeout),
			TCPBeLiberal:          c.Conntrack.TCPBeLiberal,
			UDPTimeout:            c.Conntrack.UDPTimeout.Duration,
			UDPStreamTimeout:      c.Conntrack.UDPStreamTimeout.Duration,
		},
		FeatureGates: make(map[string]bool, len(c.FeatureGates)),
	}
	for k, v := range c.FeatureGates {
		cfg.FeatureGates[k] = v
	}
	if _, err := newKubeProxyFeatureGate(c.FeatureGates); err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %w", r.from.describe(setting{"feature-gates", "featureGates"}), err))
	}

	if cfg.Mode != "" && !slices.Contains(proxyModes(), cfg.Mode) {
		r.invalid(setting{"proxy-mode", "mode"}, cfg.Mode, "must be one of userspace, iptables, ipvs, nftables")
	}
	if cfg.Mode == mode.NFTables {
		// kube-proxy's nftables mode has its own masqueradeAll (the
		// --masquerade-all flag sets both).
		cfg.MasqueradeAll = c.NFTables.MasqueradeAll
	}

	// Addresses.
	bindSetting := setting{"bind-address", "bindAddress"}
	if ip := netutils.ParseIPSloppy(c.BindAddress); ip == nil {
		r.invalid(bindSetting, c.BindAddress, "must be an IP address")
	} else {
		cfg.BindAddress = toAddr(ip)
	}
	cfg.HealthzBindAddress = r.hostPort(setting{"healthz-bind-address", "healthzBindAddress"}, c.HealthzBindAddress)
	cfg.MetricsBindAddress = r.hostPort(setting{"metrics-bind-address", "metricsBindAddress"}, c.MetricsBindAddress)
	if v := c.ShowHiddenMetricsForVersion; v != "" && !isMajorMinor(v) {
		r.invalid(setting{"show-hidden-metrics-for-version", "showHiddenMetricsForVersion"}, v, "must be <major>.<minor>, e.g. 1.35")
	}
	if cfg.OOMScoreAdj < -1000 || cfg.OOMScoreAdj > 1000 {
		r.invalid(setting{"oom-score-adj", "oomScoreAdj"}, cfg.OOMScoreAdj, "must be within [-1000, 1000]")
	}

	// iptables and ipvs.
	if cfg.MasqueradeBit < 0 || cfg.MasqueradeBit > 31 {
		r.invalid(setting{"iptables-masquerade-bit", "iptables.masqueradeBit"}, cfg.MasqueradeBit, "must be within [0, 31]")
	}
	r.syncPeriods(setting{"iptables-sync-period", "iptables.syncPeriod"}, cfg.IPTablesSyncPeriod,
		setting{"iptables-min-sync-period", "iptables.minSyncPeriod"}, cfg.IPTablesMinSyncPeriod)
	if cfg.NFTablesMasqueradeBit < 0 || cfg.NFTablesMasqueradeBit > 31 {
		r.invalid(setting{"nftables-masquerade-bit", "nftables.masqueradeBit"}, cfg.NFTablesMasqueradeBit, "must be within [0, 31]")
	}
	r.syncPeriods(setting{"nftables-sync-period", "nftables.syncPeriod"}, cfg.NFTablesSyncPeriod,
		setting{"nftables-min-sync-period", "nftables.minSyncPeriod"}, cfg.NFTablesMinSyncPeriod)
	r.syncPeriods(setting{"ipvs-sync-period", "ipvs.syncPeriod"}, cfg.IPVSSyncPeriod,
		setting{"ipvs-min-sync-period", "ipvs.minSyncPeriod"}, cfg.IPVSMinSyncPeriod)
	switch {
	case cfg.IPVSScheduler == "":
		cfg.IPVSScheduler = defaultIPVSScheduler
	case !slices.Contains(ipvsSchedulers(), cfg.IPVSScheduler):
		r.invalid(setting{"ipvs-scheduler", "ipvs.scheduler"}, cfg.IPVSScheduler, "must be one of %s", strings.Join(ipvsSchedulers(), ", "))
	}
	cfg.IPVSExcludeCIDRs = r.cidrList(setting{"ipvs-exclude-cidrs", "ipvs.excludeCIDRs"}, c.IPVS.ExcludeCIDRs)
	r.nonNegative(setting{"ipvs-tcp-timeout", "ipvs.tcpTimeout"}, cfg.IPVSTCPTimeout)
	r.nonNegative(setting{"ipvs-tcpfin-timeout", "ipvs.tcpFinTimeout"}, cfg.IPVSTCPFinTimeout)
	r.nonNegative(setting{"ipvs-udp-timeout", "ipvs.udpTimeout"}, cfg.IPVSUDPTimeout)

	// userspace.
	cfg.PortRange = r.portRange(setting{"proxy-port-range", "portRange"}, c.PortRange)
	// Unset in the file and not given (a given --udp-timeout=0 is an error).
	if cfg.UDPIdleTimeout == 0 && !from.changed("udp-timeout") {
		cfg.UDPIdleTimeout = defaultUDPIdleTimeout
	}
	if cfg.UDPIdleTimeout <= 0 {
		r.invalid(setting{"udp-timeout", "udpIdleTimeout"}, cfg.UDPIdleTimeout, "must be greater than 0")
	}
	switch {
	case cfg.UserspacePortals == "":
		cfg.UserspacePortals = contract.PortalsAuto
	case !slices.Contains(contract.AllPortals(), cfg.UserspacePortals):
		r.invalid(setting{"userspace-portals", "userspacePortals"}, cfg.UserspacePortals, "must be one of auto, redirect, local, sklookup")
	}

	// Which traffic is local, and where NodePorts listen.
	r.nodePortAddresses(cfg, c.NodePortAddresses)
	r.detectLocal(cfg, c.ClusterCIDR)

	// Conntrack.
	if cfg.Conntrack.MaxPerCore < 0 {
		r.invalid(setting{"conntrack-max-per-core", "conntrack.maxPerCore"}, cfg.Conntrack.MaxPerCore, "must be greater than or equal to 0")
	}
	if cfg.Conntrack.Min < 0 {
		r.invalid(setting{"conntrack-min", "conntrack.min"}, cfg.Conntrack.Min, "must be greater than or equal to 0")
	}
	r.nonNegative(setting{"conntrack-tcp-timeout-established", "conntrack.tcpEstablishedTimeout"}, cfg.Conntrack.TCPEstablishedTimeout)
	r.nonNegative(setting{"conntrack-tcp-timeout-close-wait", "conntrack.tcpCloseWaitTimeout"}, cfg.Conntrack.TCPCloseWaitTimeout)
	r.nonNegative(setting{"conntrack-udp-timeout", "conntrack.udpTimeout"}, cfg.Conntrack.UDPTimeout)
	r.nonNegative(setting{"conntrack-udp-timeout-stream", "conntrack.udpStreamTimeout"}, cfg.Conntrack.UDPStreamTimeout)

	// Talking to the source of services.
	if q := float64(cfg.QPS); q < 0 || math.IsNaN(q) || math.IsInf(q, 0) {
		r.invalid(setting{"kube-api-qps", "clientConnection.qps"}, cfg.QPS, "must be a finite number greater than or equal to 0")
	}
	if cfg.Burst < 0 {
		r.invalid(setting{"kube-api-burst", "clientConnection.burst"}, cfg.Burst, "must be greater than or equal to 0")
	}
	r.nonNegative(setting{"config-sync-period", "configSyncPeriod"}, cfg.ConfigSyncPeriod)
	if cfg.ServicesFile != "" {
		servicesSetting := setting{"services-file", "servicesFile"}
		if _, err := os.Stat(cfg.ServicesFile); err != nil {
			r.invalid(servicesSetting, cfg.ServicesFile, "%v", err)
		}
		if cfg.Kubeconfig != "" {
			r.errs = append(r.errs, fmt.Errorf("%s and %s are mutually exclusive: services come either from a manifest or from a cluster",
				r.from.describe(servicesSetting), r.from.describe(setting{"kubeconfig", "clientConnection.kubeconfig"})))
		}
	}

	return cfg, r.errs
}

// hostPort accepts ip:port with a port in 1..65535, or "" or port 0, which
// disable the server (returned as "").
func (r *resolver) hostPort(s setting, value string) string {
	if value == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(value)
	if err != nil {
		r.invalid(s, value, "must be an IP address and port (ip:port or [ipv6]:port)")
		return ""
	}
	if netutils.ParseIPSloppy(host) == nil {
		r.invalid(s, value, "%q is not an IP address", host)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		r.invalid(s, value, "port %q must be a number within [1, 65535] (0 disables the server)", port)
	}
	if p == 0 {
		return ""
	}
	return value
}

func (r *resolver) syncPeriods(sync setting, syncPeriod time.Duration, minSync setting, minSyncPeriod time.Duration) {
	if syncPeriod <= 0 {
		r.invalid(sync, syncPeriod, "must be greater than 0")
	}
	switch {
	case minSyncPeriod < 0:
		r.invalid(minSync, minSyncPeriod, "must be greater than or equal to 0")
	case syncPeriod > 0 && minSyncPeriod > syncPeriod:
		r.invalid(minSync, minSyncPeriod, "must not be greater than %s (%s)", r.from.describe(sync), syncPeriod)
	}
}

func (r *resolver) nonNegative(s setting, d time.Duration) {
	if d < 0 {
		r.invalid(s, d, "must be greater than or equal to 0")
	}
}

func (r *resolver) cidrList(s setting, values []string) []netip.Prefix {
	var prefixes []netip.Prefix
	for _, v := range values {
		p, err := parseCIDR(v)
		if err != nil {
			r.invalid(s, v, "must be a CIDR (e.g. 198.18.0.0/16 or fd00::/64)")
			continue
		}
		prefixes = append(prefixes, p)
	}
	return prefixes
}

func (r *resolver) nodePortAddresses(cfg *Config, values []string) {
	s := setting{"nodeport-addresses", "nodePortAddresses"}
	if slices.Contains(values, "primary") {
		if len(values) != 1 {
			r.invalid(s, strings.Join(values, ","), "'primary' cannot be combined with CIDRs")
			return
		}
		cfg.NodePortPrimary = true
		return
	}
	if len(values) == 0 && cfg.Mode == mode.NFTables {
		// kube-proxy's default in this mode: NodePorts on the primary IPs only.
		cfg.NodePortPrimary = true
		return
	}
	cfg.NodePortAddresses = r.cidrList(s, values)
}

func (r *resolver) detectLocal(cfg *Config, clusterCIDR string) {
	modeSetting := setting{"detect-local-mode", "detectLocalMode"}
	cfg.DetectLocalMode = cmp.Or(cfg.DetectLocalMode, defaultDetectLocalMode)
	switch cfg.DetectLocalMode {
	case "BridgeInterface":
		if cfg.PodBridgeInterface == "" {
			r.invalid(modeSetting, cfg.DetectLocalMode, "needs %s", r.from.describe(setting{"pod-bridge-interface", "detectLocal.bridgeInterface"}))
		}
	case "InterfaceNamePrefix":
		if cfg.PodInterfaceNamePrefix == "" {
			r.invalid(modeSetting, cfg.DetectLocalMode, "needs %s", r.from.describe(setting{"pod-interface-name-prefix", "detectLocal.interfaceNamePrefix"}))
		}
	case "ClusterCIDR", "NodeCIDR":
	default:
		r.invalid(modeSetting, cfg.DetectLocalMode, "must be one of %s", strings.Join(detectLocalModes(), ", "))
	}

	if strings.TrimSpace(clusterCIDR) == "" {
		return
	}
	s := setting{"cluster-cidr", "clusterCIDR"}
	parts := strings.Split(clusterCIDR, ",")
	if len(parts) > 2 {
		r.invalid(s, clusterCIDR, "must be one CIDR or a dual-stack pair (one IPv4, one IPv6)")
		return
	}
	cidrs := r.cidrList(s, trimAll(parts))
	if len(cidrs) != len(parts) {
		return
	}
	if len(cidrs) == 2 && cidrs[0].Addr().Is4() == cidrs[1].Addr().Is4() {
		r.invalid(s, clusterCIDR, "a pair must hold one IPv4 and one IPv6 CIDR")
		return
	}
	cfg.ClusterCIDRs = cidrs
}

// portRange parses kube-proxy's port range forms: "", "port", "lo-hi" or
// "lo+n". "0-0" (and "0") mean no restriction, as for the userspace proxier.
func (r *resolver) portRange(s setting, value string) PortRange {
	value = strings.TrimSpace(value)
	if value == "" {
		return PortRange{}
	}
	lo, hi, err := parsePortRange(value)
	if err != nil {
		r.invalid(s, value, "%v", err)
		return PortRange{}
	}
	if lo == 0 && hi == 0 {
		return PortRange{}
	}
	return PortRange{Base: lo, Size: hi - lo + 1}
}

func parsePortRange(value string) (lo, hi int, err error) {
	const form = "must be empty, a port, lo-hi or lo+n"
	atoi := func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 65535 {
			return 0, fmt.Errorf("%s with ports within [0, 65535]", form)
		}
		return n, nil
	}
	switch {
	case strings.Contains(value, "-") && !strings.Contains(value, "+"):
		a, b, _ := strings.Cut(value, "-")
		if lo, err = atoi(a); err != nil {
			return 0, 0, err
		}
		if hi, err = atoi(b); err != nil {
			return 0, 0, err
		}
	case strings.Contains(value, "+") && !strings.Contains(value, "-"):
		a, b, _ := strings.Cut(value, "+")
		if lo, err = atoi(a); err != nil {
			return 0, 0, err
		}
		n, err := atoi(b)
		if err != nil {
			return 0, 0, err
		}
		hi = lo + n
		if hi > 65535 {
			return 0, 0, fmt.Errorf("ends at %d, beyond 65535", hi)
		}
	case !strings.ContainsAny(value, "-+"):
		if lo, err = atoi(value); err != nil {
			return 0, 0, err
		}
		hi = lo
	default:
		return 0, 0, errors.New(form)
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("last port %d is below first port %d", hi, lo)
	}
	return lo, hi, nil
}

func parseCIDR(s string) (netip.Prefix, error) {
	_, ipnet, err := netutils.ParseCIDRSloppy(strings.TrimSpace(s))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("parsing CIDR %q: %w", s, err)
	}
	ones, _ := ipnet.Mask.Size()
	return netip.PrefixFrom(toAddr(ipnet.IP), ones), nil
}

// toAddr converts a parsed net.IP, keeping IPv4 as IPv4 (not v4-in-v6).
func toAddr(ip net.IP) netip.Addr {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr
}

func trimAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = strings.TrimSpace(s)
	}
	return out
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func derefDuration(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}
