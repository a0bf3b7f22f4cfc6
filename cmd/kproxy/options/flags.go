package options

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
)

// Options holds what the command line says before it is merged with the
// --config file. Flags are bound to a defaulted FileConfiguration so --help
// shows kube-proxy's defaults; only flags the user actually set are copied
// over the defaults, or, with --config, over the file's values for the few
// flags kube-proxy honours there (honouredWithConfig).
type Options struct {
	// ConfigFile is --config.
	ConfigFile string
	// WriteConfigTo is --write-config-to.
	WriteConfigTo string
	// Cleanup is --cleanup.
	Cleanup bool
	// InitOnly is --init-only.
	InitOnly bool

	// Hostname returns the OS hostname; tests replace it.
	Hostname func() (string, error)
	// Logger receives the warnings Complete gives (also in
	// Config.Warnings).
	Logger klog.Logger

	master      string
	healthzPort int32
	metricsPort int32
	// bootIDFile and machineIDFile are kube-proxy's --boot-id-file and
	// --machine-id-file, which it takes from cAdvisor's Go flags and never
	// reads (it uses cAdvisor only for the CPU count): accepted, with a
	// warning when given.
	bootIDFile    string
	machineIDFile string
	fromFlags     *FileConfiguration
	// effective is the merged configuration Complete validated.
	effective *FileConfiguration
}

// NewOptions returns Options holding kube-proxy's defaults.
func NewOptions() *Options {
	return &Options{
		Hostname:      os.Hostname,
		Logger:        klog.Background(),
		healthzPort:   defaultHealthzPort,
		metricsPort:   defaultMetricsPort,
		bootIDFile:    defaultBootIDFile,
		machineIDFile: defaultMachineIDFile,
		fromFlags:     NewDefaultFileConfiguration(),
	}
}

// AddFlags registers every kproxy flag (kube-proxy's names, defaults and
// meanings, plus --services-file) on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	f := o.fromFlags
	c := &f.KubeProxyConfiguration

	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile,
		"Path to a KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1, YAML or JSON). As in kube-proxy, it replaces the flags that are settings: only --hostname-override, --services-file and the logging flags still apply (the others given are ignored, with a warning).")
	fs.StringVar(&o.WriteConfigTo, "write-config-to", o.WriteConfigTo,
		"If set, write the effective configuration (defaults, then --config, then flags) to this file and exit without touching the kernel.")
	fs.BoolVar(&o.Cleanup, "cleanup", o.Cleanup,
		"If true, remove everything any proxy mode (userspace, iptables, ipvs or nftables; kproxy's or kube-proxy's) may have installed, then exit.")
	fs.BoolVar(&o.InitOnly, "init-only", o.InitOnly,
		"If true, do the setup that needs full root privileges and exit; kproxy can then run with only CAP_NET_ADMIN.")
	fs.Var(newFeatureGatesValue(&c.FeatureGates), "feature-gates",
		"Comma-separated key=true|false pairs enabling or disabling kube-proxy v1.36's feature gates, checked as kube-proxy checks them (an unknown gate, or a locked one set to another value, is an error). kproxy acts on AllowServiceExternalIPs (false: spec.externalIPs are not programmed). Options are:\n"+
			strings.Join(knownFeatures(), "\n"))

	fs.StringVar(&c.ClientConnection.Kubeconfig, "kubeconfig", c.ClientConnection.Kubeconfig,
		"Path to a kubeconfig file with the API server location and credentials (--master overrides the location).")
	fs.StringVar(&o.master, "master", o.master,
		"Address of the Kubernetes API server; takes precedence over the one in the kubeconfig.")
	fs.StringVar(&f.ServicesFile, "services-file", f.ServicesFile,
		"kproxy only: read Services and EndpointSlices from this manifest file or directory (watched for changes) instead of a cluster. Cannot be combined with --kubeconfig or --master.")
	fs.StringVar(&c.ClientConnection.ContentType, "kube-api-content-type", c.ClientConnection.ContentType,
		"Content type of the requests kproxy sends to the API server.")
	fs.Float32Var(&c.ClientConnection.QPS, "kube-api-qps", c.ClientConnection.QPS,
		"Queries per second allowed towards the API server.")
	fs.Int32Var(&c.ClientConnection.Burst, "kube-api-burst", c.ClientConnection.Burst,
		"Request burst allowed towards the API server.")
	fs.DurationVar(&c.ConfigSyncPeriod.Duration, "config-sync-period", c.ConfigSyncPeriod.Duration,
		"How often the Service and EndpointSlice informers resync from the API server. 0 disables periodic resync.")

	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride,
		"Name of the Node kproxy runs on. When empty, the machine's hostname (lowercased) is used.")
	fs.StringVar(&c.BindAddress, "bind-address", c.BindAddress,
		"This node's primary IP as far as kproxy is concerned (the name is historical: nothing binds to it).")
	fs.BoolVar(&c.BindAddressHardFail, "bind-address-hard-fail", c.BindAddressHardFail,
		"If true, failing to bind the healthz or metrics port is fatal; if false it is logged and retried every 5 s while kproxy proxies.")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress,
		"IP address and port (ip or ip:port) the health check server listens on. Empty or port 0 disables it.")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress,
		"IP address and port (ip or ip:port) the metrics server listens on; use 0.0.0.0:10249 or [::]:10249 for all interfaces. Empty or port 0 disables it.")
	fs.Int32Var(&o.healthzPort, "healthz-port", o.healthzPort, "Port of the health check server; 0 disables it.")
	_ = fs.MarkDeprecated("healthz-port", "use --healthz-bind-address instead")
	fs.Int32Var(&o.metricsPort, "metrics-port", o.metricsPort, "Port of the metrics server; 0 disables it.")
	_ = fs.MarkDeprecated("metrics-port", "use --metrics-bind-address instead")
	fs.BoolVar(&c.EnableProfiling, "profiling", c.EnableProfiling,
		"If true, serve pprof profiles under /debug/pprof on the metrics server.")
	fs.StringVar(&c.ShowHiddenMetricsForVersion, "show-hidden-metrics-for-version", c.ShowHiddenMetricsForVersion,
		"Previous minor version (<major>.<minor>, e.g. 1.35) whose hidden metrics should still be shown.")
	fs.Int32Var(c.OOMScoreAdj, "oom-score-adj", *c.OOMScoreAdj,
		"oom_score_adj for the kproxy process, within [-1000, 1000].")

	fs.StringVar((*string)(&c.Mode), "proxy-mode", string(c.Mode),
		"Proxy mode: 'userspace', 'iptables', 'ipvs' or 'nftables'. Empty picks iptables when the kernel supports it, else userspace.")
	fs.BoolVar(&c.IPTables.MasqueradeAll, "masquerade-all", c.IPTables.MasqueradeAll,
		"If true, SNAT all traffic sent to Service cluster IPs (some CNI plugins need this).")
	fs.Int32Var(c.IPTables.MasqueradeBit, "iptables-masquerade-bit", *c.IPTables.MasqueradeBit,
		"In iptables or ipvs mode, the fwmark bit that marks packets needing SNAT, within [0, 31] (the nftables mode takes --nftables-masquerade-bit; the userspace mode does not mark).")
	fs.BoolVar(c.IPTables.LocalhostNodePorts, "iptables-localhost-nodeports", *c.IPTables.LocalhostNodePorts,
		"If false, NodePorts are not reachable via localhost (iptables mode, IPv4 only).")
	fs.DurationVar(&c.IPTables.SyncPeriod.Duration, "iptables-sync-period", c.IPTables.SyncPeriod.Duration,
		"Maximum interval (e.g. '5s', '1m', '2h22m') between full resynchronisations of the rules. Must be greater than 0.")
	fs.DurationVar(&c.IPTables.MinSyncPeriod.Duration, "iptables-min-sync-period", c.IPTables.MinSyncPeriod.Duration,
		"Minimum interval between iptables rule syncs (e.g. '5s', '1m'). 0 syncs on every Service or EndpointSlice change.")
	fs.DurationVar(&c.NFTables.SyncPeriod.Duration, "nftables-sync-period", c.NFTables.SyncPeriod.Duration,
		"Maximum interval between full resynchronisations of the nftables rules (kproxy's; kube-proxy 1.36 takes --iptables-sync-period in nftables mode, and so does kproxy when this flag is not given).")
	fs.DurationVar(&c.NFTables.MinSyncPeriod.Duration, "nftables-min-sync-period", c.NFTables.MinSyncPeriod.Duration,
		"Minimum interval between nftables rule syncs (kproxy's; else --iptables-min-sync-period applies, as in kube-proxy). 0 syncs on every change.")
	fs.Int32Var(c.NFTables.MasqueradeBit, "nftables-masquerade-bit", *c.NFTables.MasqueradeBit,
		"In nftables mode, the mark bit that marks packets needing SNAT, within [0, 31] (nftables.masqueradeBit; --iptables-masquerade-bit does not apply there).")
	fs.DurationVar(&c.IPVS.SyncPeriod.Duration, "ipvs-sync-period", c.IPVS.SyncPeriod.Duration,
		"Maximum interval (e.g. '5s', '1m', '2h22m') between full resynchronisations of the IPVS rules. Must be greater than 0.")
	// kube-proxy's default is its one internal minimum (1s); the file's
	// ipvs.minSyncPeriod defaults to 0s. Only a given flag is copied into
	// the configuration (Effective), so the default here is what --help
	// and /flagz show.
	fs.DurationVar(&c.IPVS.MinSyncPeriod.Duration, "ipvs-min-sync-period", defaultMinSyncPeriod,
		"Minimum interval between IPVS rule syncs (e.g. '5s', '1m'). 0 syncs on every Service or EndpointSlice change.")
	fs.StringVar(&c.IPVS.Scheduler, "ipvs-scheduler", c.IPVS.Scheduler,
		"IPVS scheduler in ipvs mode: "+strings.Join(ipvsSchedulers(), ", ")+". Empty means rr.")
	fs.StringSliceVar(&c.IPVS.ExcludeCIDRs, "ipvs-exclude-cidrs", c.IPVS.ExcludeCIDRs,
		"Comma-separated CIDRs whose IPVS rules kproxy must leave alone when cleaning up.")
	fs.BoolVar(&c.IPVS.StrictARP, "ipvs-strict-arp", c.IPVS.StrictARP,
		"If true, set arp_ignore=1 and arp_announce=2 so the node does not answer ARP for IPVS addresses.")
	fs.DurationVar(&c.IPVS.TCPTimeout.Duration, "ipvs-tcp-timeout", c.IPVS.TCPTimeout.Duration,
		"Idle timeout of IPVS TCP connections; 0 leaves the kernel's value.")
	fs.DurationVar(&c.IPVS.TCPFinTimeout.Duration, "ipvs-tcpfin-timeout", c.IPVS.TCPFinTimeout.Duration,
		"Timeout of IPVS TCP connections after a FIN; 0 leaves the kernel's value.")
	fs.DurationVar(&c.IPVS.UDPTimeout.Duration, "ipvs-udp-timeout", c.IPVS.UDPTimeout.Duration,
		"Timeout of IPVS UDP flows; 0 leaves the kernel's value.")

	fs.StringVar(&c.PortRange, "proxy-port-range", c.PortRange,
		"Host ports the userspace proxier may open (begin-end, begin+offset or a single port, inclusive). Empty or 0-0 means any free port.")
	fs.DurationVar(&f.UDPIdleTimeout.Duration, "udp-timeout", defaultUDPIdleTimeout,
		"How long the userspace proxier keeps an idle UDP flow open (e.g. '250ms', '2s'). Must be greater than 0.")
	fs.StringVar(&f.UserspacePortals, "userspace-portals", f.UserspacePortals,
		"How the userspace mode steers Service traffic to its relays: 'redirect' (iptables REDIRECT rules to proxy ports), 'sklookup' (service IPs made local with routes, a BPF socket-lookup program hands their service ports to one relay socket per protocol and drops their other ports; no netfilter needed), 'local' (service IPs made local with routes, relays listening on each; no netfilter, no BPF) or 'auto' (redirect where the nat table works, else sklookup where the kernel loads it, else local). Empty means auto.")
	fs.BoolVar(&f.UserspaceServiceMetrics, "userspace-service-metrics", f.UserspaceServiceMetrics,
		"In the userspace mode, export the relays' counters per service port on /metrics (kproxy_userspace_service_*, labelled service=\"namespace/name:port\"): about five series per service port, plus one per refusal reason seen. Off by default: a large cluster has tens of thousands of service ports.")
	fs.StringSliceVar(&c.NodePortAddresses, "nodeport-addresses", c.NodePortAddresses,
		"CIDRs containing the node IPs NodePorts are served on, or the single value 'primary' for the node's primary IPs. Empty means all local IPs.")

	fs.StringVar((*string)(&c.DetectLocalMode), "detect-local-mode", string(c.DetectLocalMode),
		"How to tell traffic from local pods: "+strings.Join(detectLocalModes(), ", ")+". Empty means ClusterCIDR.")
	fs.StringVar(&c.ClusterCIDR, "cluster-cidr", c.ClusterCIDR,
		"Pod CIDR of the cluster (a comma-separated IPv4/IPv6 pair for dual-stack). With --detect-local-mode=ClusterCIDR, traffic from it counts as local.")
	fs.StringVar(&c.DetectLocal.BridgeInterface, "pod-bridge-interface", c.DetectLocal.BridgeInterface,
		"With --detect-local-mode=BridgeInterface, traffic arriving from this bridge counts as local.")
	fs.StringVar(&c.DetectLocal.InterfaceNamePrefix, "pod-interface-name-prefix", c.DetectLocal.InterfaceNamePrefix,
		"With --detect-local-mode=InterfaceNamePrefix, traffic from interfaces with this name prefix counts as local.")

	fs.StringVar(&o.bootIDFile, "boot-id-file", o.bootIDFile,
		"Comma-separated list of files to check for boot-id. Accepted as kube-proxy accepts it; neither kube-proxy nor kproxy reads these files.")
	fs.StringVar(&o.machineIDFile, "machine-id-file", o.machineIDFile,
		"Comma-separated list of files to check for machine-id. Accepted as kube-proxy accepts it; neither kube-proxy nor kproxy reads these files.")

	fs.Int32Var(c.Conntrack.MaxPerCore, "conntrack-max-per-core", *c.Conntrack.MaxPerCore,
		"Conntrack entries to allow per CPU core (0 leaves the limit as it is and ignores --conntrack-min).")
	fs.Int32Var(c.Conntrack.Min, "conntrack-min", *c.Conntrack.Min,
		"Minimum conntrack table size whatever --conntrack-max-per-core gives (set --conntrack-max-per-core=0 to leave the limit as it is).")
	fs.DurationVar(&c.Conntrack.TCPEstablishedTimeout.Duration, "conntrack-tcp-timeout-established", c.Conntrack.TCPEstablishedTimeout.Duration,
		"Idle timeout of established TCP conntrack entries (0 leaves the kernel's value).")
	fs.DurationVar(&c.Conntrack.TCPCloseWaitTimeout.Duration, "conntrack-tcp-timeout-close-wait", c.Conntrack.TCPCloseWaitTimeout.Duration,
		"Timeout of TCP conntrack entries in CLOSE_WAIT.")
	fs.BoolVar(&c.Conntrack.TCPBeLiberal, "conntrack-tcp-be-liberal", c.Conntrack.TCPBeLiberal,
		"If true, set nf_conntrack_tcp_be_liberal=1 so out-of-window TCP packets are not marked INVALID.")
	fs.DurationVar(&c.Conntrack.UDPTimeout.Duration, "conntrack-udp-timeout", c.Conntrack.UDPTimeout.Duration,
		"Idle timeout of UNREPLIED UDP conntrack entries (0 leaves the kernel's value).")
	fs.DurationVar(&c.Conntrack.UDPStreamTimeout.Duration, "conntrack-udp-timeout-stream", c.Conntrack.UDPStreamTimeout.Duration,
		"Idle timeout of ASSURED UDP conntrack entries (0 leaves the kernel's value).")
}

// honouredWithConfig reports whether a flag that is a file setting still
// applies next to --config. kube-proxy v1.36 (cmd/kube-proxy/app/options.go
// Complete) replaces its flag-bound configuration by the file's and then
// applies only --hostname-override (when not empty) and the logging flags;
// --master, --cleanup, --init-only and --write-config-to are not settings
// and apply anyway. --services-file is kproxy's --master: where services
// come from, so it applies too.
func honouredWithConfig(flag string) bool {
	return flag == "hostname-override" || flag == "services-file"
}

// flagSyntax checks the flags kproxy keeps as plain strings the way
// kube-proxy's flag types (IPVar, IPPortVar) check them while parsing, so
// that a malformed value is refused even when --config makes the flag
// ignored. Empty values pass, as there.
func flagSyntax() map[string]func(string) error {
	ipPort := func(v string) error {
		if v == "" || netutils.ParseIPSloppy(v) != nil {
			return nil
		}
		host, port, err := net.SplitHostPort(v)
		if err != nil {
			return fmt.Errorf("not in a valid format (ip or ip:port): %w", err)
		}
		if netutils.ParseIPSloppy(host) == nil {
			return fmt.Errorf("%q is not a valid IP address", host)
		}
		if _, err := netutils.ParsePort(port, true); err != nil {
			return fmt.Errorf("%q is not a valid port", port)
		}
		return nil
	}
	return map[string]func(string) error{
		"bind-address": func(v string) error {
			if v != "" && netutils.ParseIPSloppy(v) == nil {
				return errors.New("not a valid IP address")
			}
			return nil
		},
		"healthz-bind-address": ipPort,
		"metrics-bind-address": ipPort,
	}
}

// flagOverrides copies one explicitly set flag's value from the flag-bound
// configuration (src) over the effective one (dst). Flags absent here
// (--config, --master, ...) are not part of the file format.
func flagOverrides() map[string]func(dst, src *FileConfiguration) {
	return map[string]func(dst, src *FileConfiguration){
		"feature-gates": func(d, s *FileConfiguration) {
			// Per gate: a gate named on the command line wins over the file.
			for k, v := range s.FeatureGates {
				d.FeatureGates[k] = v
			}
		},
		"kubeconfig":            func(d, s *FileConfiguration) { d.ClientConnection.Kubeconfig = s.ClientConnection.Kubeconfig },
		"services-file":         func(d, s *FileConfiguration) { d.ServicesFile = s.ServicesFile },
		"kube-api-content-type": func(d, s *FileConfiguration) { d.ClientConnection.ContentType = s.ClientConnection.ContentType },
		"kube-api-qps":          func(d, s *FileConfiguration) { d.ClientConnection.QPS = s.ClientConnection.QPS },
		"kube-api-burst":        func(d, s *FileConfiguration) { d.ClientConnection.Burst = s.ClientConnection.Burst },
		"config-sync-period":    func(d, s *FileConfiguration) { d.ConfigSyncPeriod = s.ConfigSyncPeriod },
		// As in kube-proxy, an empty --hostname-override keeps the file's.
		"hostname-override": func(d, s *FileConfiguration) {
			switch name := strings.TrimSpace(s.HostnameOverride); {
			case name != "":
				// kube-proxy stores it trimmed and lowercased (it shows in
				// --write-config-to).
				d.HostnameOverride = strings.ToLower(name)
			case s.HostnameOverride != "":
				d.HostnameOverride = s.HostnameOverride // blank: refused later
			}
		},
		"bind-address": func(d, s *FileConfiguration) { d.BindAddress = s.BindAddress },
		"bind-address-hard-fail": func(d, s *FileConfiguration) {
			d.BindAddressHardFail = s.BindAddressHardFail
		},
		"healthz-bind-address": func(d, s *FileConfiguration) { d.HealthzBindAddress = s.HealthzBindAddress },
		"metrics-bind-address": func(d, s *FileConfiguration) { d.MetricsBindAddress = s.MetricsBindAddress },
		"profiling":            func(d, s *FileConfiguration) { d.EnableProfiling = s.EnableProfiling },
		"show-hidden-metrics-for-version": func(d, s *FileConfiguration) {
			d.ShowHiddenMetricsForVersion = s.ShowHiddenMetricsForVersion
		},
		"oom-score-adj": func(d, s *FileConfiguration) { d.OOMScoreAdj = ptrTo(*s.OOMScoreAdj) },
		"proxy-mode":    func(d, s *FileConfiguration) { d.Mode = s.Mode },
		// kube-proxy's --masquerade-all is one setting for every mode.
		"masquerade-all": func(d, s *FileConfiguration) {
			d.IPTables.MasqueradeAll = s.IPTables.MasqueradeAll
			d.NFTables.MasqueradeAll = s.IPTables.MasqueradeAll
		},
		"iptables-masquerade-bit": func(d, s *FileConfiguration) {
			d.IPTables.MasqueradeBit = ptrTo(*s.IPTables.MasqueradeBit)
		},
		"iptables-localhost-nodeports": func(d, s *FileConfiguration) {
			d.IPTables.LocalhostNodePorts = ptrTo(*s.IPTables.LocalhostNodePorts)
		},
		// kube-proxy applies the iptables sync flags to its nftables mode
		// too; the nftables-* flags, visited later (flags are visited in
		// name order), win when both are given.
		"iptables-sync-period": func(d, s *FileConfiguration) {
			d.IPTables.SyncPeriod = s.IPTables.SyncPeriod
			d.NFTables.SyncPeriod = s.IPTables.SyncPeriod
		},
		"iptables-min-sync-period": func(d, s *FileConfiguration) {
			d.IPTables.MinSyncPeriod = s.IPTables.MinSyncPeriod
			d.NFTables.MinSyncPeriod = s.IPTables.MinSyncPeriod
		},
		"nftables-sync-period":     func(d, s *FileConfiguration) { d.NFTables.SyncPeriod = s.NFTables.SyncPeriod },
		"nftables-min-sync-period": func(d, s *FileConfiguration) { d.NFTables.MinSyncPeriod = s.NFTables.MinSyncPeriod },
		"nftables-masquerade-bit": func(d, s *FileConfiguration) {
			d.NFTables.MasqueradeBit = ptrTo(*s.NFTables.MasqueradeBit)
		},
		"ipvs-sync-period":     func(d, s *FileConfiguration) { d.IPVS.SyncPeriod = s.IPVS.SyncPeriod },
		"ipvs-min-sync-period": func(d, s *FileConfiguration) { d.IPVS.MinSyncPeriod = s.IPVS.MinSyncPeriod },
		"ipvs-scheduler":       func(d, s *FileConfiguration) { d.IPVS.Scheduler = s.IPVS.Scheduler },
		"ipvs-exclude-cidrs": func(d, s *FileConfiguration) {
			d.IPVS.ExcludeCIDRs = append([]string(nil), s.IPVS.ExcludeCIDRs...)
		},
		"ipvs-strict-arp":     func(d, s *FileConfiguration) { d.IPVS.StrictARP = s.IPVS.StrictARP },
		"ipvs-tcp-timeout":    func(d, s *FileConfiguration) { d.IPVS.TCPTimeout = s.IPVS.TCPTimeout },
		"ipvs-tcpfin-timeout": func(d, s *FileConfiguration) { d.IPVS.TCPFinTimeout = s.IPVS.TCPFinTimeout },
		"ipvs-udp-timeout":    func(d, s *FileConfiguration) { d.IPVS.UDPTimeout = s.IPVS.UDPTimeout },
		"proxy-port-range":    func(d, s *FileConfiguration) { d.PortRange = s.PortRange },
		"udp-timeout":         func(d, s *FileConfiguration) { d.UDPIdleTimeout = s.UDPIdleTimeout },
		"userspace-portals":   func(d, s *FileConfiguration) { d.UserspacePortals = s.UserspacePortals },
		"userspace-service-metrics": func(d, s *FileConfiguration) {
			d.UserspaceServiceMetrics = s.UserspaceServiceMetrics
		},
		"nodeport-addresses": func(d, s *FileConfiguration) {
			d.NodePortAddresses = append([]string(nil), s.NodePortAddresses...)
		},
		"detect-local-mode": func(d, s *FileConfiguration) { d.DetectLocalMode = s.DetectLocalMode },
		"cluster-cidr":      func(d, s *FileConfiguration) { d.ClusterCIDR = s.ClusterCIDR },
		"pod-bridge-interface": func(d, s *FileConfiguration) {
			d.DetectLocal.BridgeInterface = s.DetectLocal.BridgeInterface
		},
		"pod-interface-name-prefix": func(d, s *FileConfiguration) {
			d.DetectLocal.InterfaceNamePrefix = s.DetectLocal.InterfaceNamePrefix
		},
		"conntrack-max-per-core": func(d, s *FileConfiguration) { d.Conntrack.MaxPerCore = ptrTo(*s.Conntrack.MaxPerCore) },
		"conntrack-min":          func(d, s *FileConfiguration) { d.Conntrack.Min = ptrTo(*s.Conntrack.Min) },
		"conntrack-tcp-timeout-established": func(d, s *FileConfiguration) {
			d.Conntrack.TCPEstablishedTimeout = ptrTo(*s.Conntrack.TCPEstablishedTimeout)
		},
		"conntrack-tcp-timeout-close-wait": func(d, s *FileConfiguration) {
			d.Conntrack.TCPCloseWaitTimeout = ptrTo(*s.Conntrack.TCPCloseWaitTimeout)
		},
		"conntrack-tcp-be-liberal":     func(d, s *FileConfiguration) { d.Conntrack.TCPBeLiberal = s.Conntrack.TCPBeLiberal },
		"conntrack-udp-timeout":        func(d, s *FileConfiguration) { d.Conntrack.UDPTimeout = s.Conntrack.UDPTimeout },
		"conntrack-udp-timeout-stream": func(d, s *FileConfiguration) { d.Conntrack.UDPStreamTimeout = s.Conntrack.UDPStreamTimeout },
	}
}

// featureGatesValue is a pflag.Value for "a=true,b=false" that fills a map.
type featureGatesValue struct{ gates *map[string]bool }

func newFeatureGatesValue(gates *map[string]bool) *featureGatesValue {
	return &featureGatesValue{gates: gates}
}

func (v *featureGatesValue) Set(s string) error {
	if *v.gates == nil {
		*v.gates = map[string]bool{}
	}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("%q is not of the form name=true|false", pair)
		}
		enabled, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("feature gate %q: %q is not a boolean", name, value)
		}
		(*v.gates)[strings.TrimSpace(name)] = enabled
	}
	return nil
}

func (v *featureGatesValue) String() string {
	if v.gates == nil || len(*v.gates) == 0 {
		return ""
	}
	pairs := make([]string, 0, len(*v.gates))
	for name, enabled := range *v.gates {
		pairs = append(pairs, fmt.Sprintf("%s=%t", name, enabled))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

func (v *featureGatesValue) Type() string { return "mapStringBool" }
