package options

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/redirect/modes/contract"
)

// TestDefaultsMatchKubeProxy checks both what --help advertises and what an
// empty command line resolves to against kube-proxy v1.36's defaults.
func TestDefaultsMatchKubeProxy(t *testing.T) {
	_, fs, err := parsed(t)
	if err != nil {
		t.Fatal(err)
	}
	flagDefaults := []struct{ flag, want string }{
		{"proxy-mode", ""},
		{"kubeconfig", ""},
		{"master", ""},
		{"config", ""},
		{"write-config-to", ""},
		{"cleanup", "false"},
		{"hostname-override", ""},
		{"bind-address", "0.0.0.0"},
		{"healthz-bind-address", "0.0.0.0:10256"},
		{"metrics-bind-address", "127.0.0.1:10249"},
		{"cluster-cidr", ""},
		{"masquerade-all", "false"},
		{"iptables-sync-period", "30s"},
		{"iptables-min-sync-period", "1s"},
		{"iptables-masquerade-bit", "14"},
		{"iptables-localhost-nodeports", "true"},
		{"ipvs-scheduler", ""},
		{"ipvs-sync-period", "30s"},
		{"ipvs-min-sync-period", "1s"},
		{"ipvs-exclude-cidrs", "[]"},
		{"ipvs-strict-arp", "false"},
		{"proxy-port-range", ""},
		{"udp-timeout", "250ms"},
		{"userspace-portals", ""},
		{"userspace-service-metrics", "false"},
		{"nodeport-addresses", "[]"},
		{"conntrack-max-per-core", "32768"},
		{"conntrack-min", "131072"},
		{"conntrack-tcp-timeout-established", "24h0m0s"},
		{"conntrack-tcp-timeout-close-wait", "1h0m0s"},
		{"conntrack-tcp-be-liberal", "false"},
		{"conntrack-udp-timeout", "0s"},
		{"conntrack-udp-timeout-stream", "0s"},
		{"config-sync-period", "15m0s"},
		{"kube-api-qps", "5"},
		{"kube-api-burst", "10"},
		{"kube-api-content-type", "application/vnd.kubernetes.protobuf"},
		{"oom-score-adj", "-999"},
		{"profiling", "false"},
		{"detect-local-mode", ""},
		{"boot-id-file", "/proc/sys/kernel/random/boot_id"},
		{"machine-id-file", "/etc/machine-id,/var/lib/dbus/machine-id"},
		{"feature-gates", ""},
		{"services-file", ""},
	}
	for _, tc := range flagDefaults {
		f := fs.Lookup(tc.flag)
		if f == nil {
			t.Errorf("flag --%s is not registered", tc.flag)
			continue
		}
		if f.DefValue != tc.want {
			t.Errorf("--%s default = %q, want %q", tc.flag, f.DefValue, tc.want)
		}
	}

	got := mustComplete(t)
	want := &Config{
		ContentType:           "application/vnd.kubernetes.protobuf",
		QPS:                   5,
		Burst:                 10,
		ConfigSyncPeriod:      15 * time.Minute,
		NodeName:              "node-a.example",
		BindAddress:           netip.MustParseAddr("0.0.0.0"),
		HealthzBindAddress:    "0.0.0.0:10256",
		MetricsBindAddress:    "127.0.0.1:10249",
		OOMScoreAdj:           -999,
		Mode:                  "",
		MasqueradeBit:         14,
		LocalhostNodePorts:    true,
		IPTablesSyncPeriod:    30 * time.Second,
		IPTablesMinSyncPeriod: time.Second,
		NFTablesSyncPeriod:    30 * time.Second,
		NFTablesMinSyncPeriod: time.Second,
		NFTablesMasqueradeBit: 14,
		IPVSSyncPeriod:        30 * time.Second,
		IPVSMinSyncPeriod:     time.Second, // kube-proxy's without --config
		IPVSScheduler:         "rr",
		UDPIdleTimeout:        250 * time.Millisecond,
		UserspacePortals:      contract.PortalsAuto,
		DetectLocalMode:       "ClusterCIDR",
		Conntrack: ConntrackConfig{
			MaxPerCore:            32768,
			Min:                   131072,
			TCPEstablishedTimeout: 24 * time.Hour,
			TCPCloseWaitTimeout:   time.Hour,
		},
		FeatureGates: map[string]bool{},
	}
	if diff := cmp.Diff(want, got, cmpOpts()...); diff != "" {
		t.Errorf("resolved defaults differ from kube-proxy's (-want +got):\n%s", diff)
	}
}

func TestIPv6BindAddressDefaultsServersToIPv6(t *testing.T) {
	path := writeTemp(t, "v6.yaml", header+"bindAddress: fd00::1\n")
	cfg := mustComplete(t, "--config", path)
	if cfg.HealthzBindAddress != "[::]:10256" || cfg.MetricsBindAddress != "[::1]:10249" {
		t.Errorf("healthz %q metrics %q, want [::]:10256 and [::1]:10249", cfg.HealthzBindAddress, cfg.MetricsBindAddress)
	}
	if cfg.BindAddress != netip.MustParseAddr("fd00::1") {
		t.Errorf("bind address %v", cfg.BindAddress)
	}
}

func TestSetDefaultsIsIdempotent(t *testing.T) {
	once := NewDefaultFileConfiguration()
	twice := NewDefaultFileConfiguration()
	SetDefaults(twice)
	if diff := cmp.Diff(once, twice); diff != "" {
		t.Errorf("second SetDefaults changed the configuration:\n%s", diff)
	}
}
