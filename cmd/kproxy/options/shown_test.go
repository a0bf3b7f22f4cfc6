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
