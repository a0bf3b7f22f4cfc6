package options

import (
	"fmt"
	"testing"
	"time"

	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
)

func TestAsKubeProxyShows(t *testing.T) {
	// periods lists nodePortAddresses and the iptables, ipvs and nftables sync and min sync periods.
	periods := func(fc *FileConfiguration) string {
		c := AsKubeProxyShows(fc)
		return fmt.Sprint(c.NodePortAddresses, c.IPTables.SyncPeriod.Duration, c.IPTables.MinSyncPeriod.Duration,
			c.IPVS.SyncPeriod.Duration, c.IPVS.MinSyncPeriod.Duration,
			c.NFTables.SyncPeriod.Duration, c.NFTables.MinSyncPeriod.Duration)
	}
	tests := []struct {
		mode string
		want string
	}{
		{"", "[] 10s 2s 0s 0s 0s 0s"},
		{"iptables", "[] 10s 2s 0s 0s 0s 0s"},
		{"userspace", "[] 10s 2s 0s 0s 0s 0s"},
		{"ipvs", "[] 0s 0s 20s 3s 0s 0s"},
		{"nftables", "[primary] 0s 0s 0s 0s 40s 4s"},
	}
	t.Run("nftables with nodePortAddresses", func(t *testing.T) {
		fc := NewDefaultFileConfiguration()
		fc.Mode, fc.NodePortAddresses = "nftables", []string{"198.19.0.0/16"}
		if got := AsKubeProxyShows(fc).NodePortAddresses; fmt.Sprint(got) != "[198.19.0.0/16]" {
			t.Errorf("nodePortAddresses shown as %v", got)
		}
	})
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			fc := NewDefaultFileConfiguration()
			fc.Mode = kubeproxyconfig.ProxyMode(tt.mode)
			fc.IPTables.SyncPeriod.Duration, fc.IPTables.MinSyncPeriod.Duration = 10*time.Second, 2*time.Second
			fc.IPVS.SyncPeriod.Duration, fc.IPVS.MinSyncPeriod.Duration = 20*time.Second, 3*time.Second
			fc.NFTables.SyncPeriod.Duration, fc.NFTables.MinSyncPeriod.Duration = 40*time.Second, 4*time.Second
			if got := periods(fc); got != tt.want {
				t.Errorf("shown periods = %s, want %s", got, tt.want)
			}
			// What the modes read is left alone.
			if len(fc.NodePortAddresses) != 0 || fc.IPVS.SyncPeriod.Duration != 20*time.Second || fc.NFTables.MinSyncPeriod.Duration != 4*time.Second || fc.IPTables.SyncPeriod.Duration != 10*time.Second {
				t.Errorf("AsKubeProxyShows changed its argument: %+v", fc.KubeProxyConfiguration)
			}
		})
	}
}

// TestCAdvisorFlags: --boot-id-file and --machine-id-file are accepted as
// kube-proxy accepts them, with a warning that they have no effect, and do
// not change the configuration.
func TestCAdvisorFlags(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{nil, nil},
		{[]string{"--boot-id-file=/a,/b"}, []string{"--boot-id-file has no effect: kube-proxy v1.36 accepts it (a cAdvisor flag) and reads no such file, and neither does kproxy"}},
		{[]string{"--machine-id-file=/m", "--boot-id-file="}, []string{
			"--boot-id-file has no effect: kube-proxy v1.36 accepts it (a cAdvisor flag) and reads no such file, and neither does kproxy",
			"--machine-id-file has no effect: kube-proxy v1.36 accepts it (a cAdvisor flag) and reads no such file, and neither does kproxy",
		}},
	}
	base := mustComplete(t)
	for _, tt := range tests {
		cfg := mustComplete(t, tt.args...)
		if fmt.Sprint(cfg.Warnings) != fmt.Sprint(tt.want) {
			t.Errorf("%q: warnings %q, want %q", tt.args, cfg.Warnings, tt.want)
		}
		cfg.Warnings = base.Warnings
		if !equal(cfg, base) {
			t.Errorf("%q changed the configuration: %+v", tt.args, cfg)
		}
	}
}

// TestIPVSMinSyncPeriod: kube-proxy's IPVS mode syncs at most once a second
// without --config (its one internal minimum, defaulted from iptables'),
// as often as changes come with a file that sets no ipvs.minSyncPeriod;
// a given flag or field wins.
func TestIPVSMinSyncPeriod(t *testing.T) {
	noMin := writeTemp(t, "ipvs.yaml", header+"mode: ipvs\n")
	withMin := writeTemp(t, "ipvs-min.yaml", header+"mode: ipvs\nipvs:\n  minSyncPeriod: 3s\n")
	tests := []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--proxy-mode=ipvs"}, time.Second},
		{[]string{"--proxy-mode=ipvs", "--ipvs-min-sync-period=0s"}, 0},
		{[]string{"--proxy-mode=ipvs", "--ipvs-min-sync-period=2s"}, 2 * time.Second},
		{[]string{"--config", noMin}, 0},
		{[]string{"--config", noMin, "--ipvs-min-sync-period=2s"}, 0}, // ignored with --config
		{[]string{"--config", withMin}, 3 * time.Second},
	}
	for _, tt := range tests {
		if got := mustComplete(t, tt.args...).IPVSMinSyncPeriod; got != tt.want {
			t.Errorf("%q: IPVS min sync period %s, want %s", tt.args, got, tt.want)
		}
	}
}
