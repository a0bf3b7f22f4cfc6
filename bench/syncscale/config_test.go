package syncscale

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/redirect/kernel"
)

func TestSettingsFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    func(*Settings)
		wantErr []string // substrings, one per bad variable
	}{
		{name: "defaults", env: nil, want: func(*Settings) {}},
		{
			name: "full table",
			env: map[string]string{SizesEnv: "100, 1000,5000,10000,30000,1000", ModesEnv: "nftables, iptables-legacy,nftables",
				KubeProxyBudgetEnv: "15m", MinSyncPeriodEnv: "0s", NPLRepeatsEnv: "9", ProxiesEnv: "kube-proxy",
				LogDirEnv: "/tmp/logs", KproxyFlagsEnv: " -v=4  --profiling "},
			want: func(s *Settings) {
				s.Sizes = []int{100, 1000, 5000, 10000, 30000}
				s.Modes = []Mode{NFTables, IPTablesLegacy}
				s.Proxies = []Proxy{KubeProxy}
				s.LogDir, s.KproxyFlags = "/tmp/logs", []string{"-v=4", "--profiling"}
				s.KubeProxyBudget = 15 * time.Minute
				s.MinSyncPeriod = 0
				s.NPLRepeats = 9
			},
		},
		{
			name: "backends, the older name, pick iptables modes",
			env:  map[string]string{BackendsEnv: "legacy,nft"},
			want: func(s *Settings) { s.Modes = []Mode{IPTablesLegacy, IPTablesNFT} },
		},
		{
			name: "short backend names in the modes",
			env:  map[string]string{ModesEnv: "nft,nftables"},
			want: func(s *Settings) { s.Modes = []Mode{IPTablesNFT, NFTables} },
		},
		{
			name: "every bad value reported",
			env: map[string]string{SizesEnv: "100,lots", ModesEnv: "nftables,ipvs", KubeProxyBudgetEnv: "0s",
				KproxyBudgetEnv: "soon", NPLRepeatsEnv: "0", ProxiesEnv: "kproxy,haproxy"},
			wantErr: []string{SizesEnv, ModesEnv, KubeProxyBudgetEnv, KproxyBudgetEnv, NPLRepeatsEnv, ProxiesEnv},
		},
		{name: "bad backend", env: map[string]string{BackendsEnv: "nft,ipvs"}, wantErr: []string{BackendsEnv, "ipvs"}},
		{name: "modes and backends both set", env: map[string]string{ModesEnv: "nftables", BackendsEnv: "nft"}, wantErr: []string{"both set"}},
		{name: "too many services", env: map[string]string{SizesEnv: "60001"}, wantErr: []string{"60001"}},
		{name: "negative min sync period", env: map[string]string{MinSyncPeriodEnv: "-1s"}, wantErr: []string{MinSyncPeriodEnv}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SettingsFromEnv(func(k string) string { return tt.env[k] })
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("SettingsFromEnv accepted %v", tt.env)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultSettings()
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRowOrder(t *testing.T) {
	s := Settings{Sizes: []int{100, 5000}, Modes: []Mode{IPTablesNFT, NFTables, IPTablesLegacy}}
	names := func(specs []RowSpec) []string {
		var out []string
		for _, r := range specs {
			out = append(out, r.Name())
		}
		return out
	}
	// Runs go size by size, the table mode by mode.
	if diff := cmp.Diff([]string{"iptables-nft-100", "nftables-100", "iptables-legacy-100", "iptables-nft-5000", "nftables-5000", "iptables-legacy-5000"}, names(s.Rows())); diff != "" {
		t.Errorf("run order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"iptables-nft-100", "iptables-nft-5000", "nftables-100", "nftables-5000", "iptables-legacy-100", "iptables-legacy-5000"}, names(s.TableSpecs())); diff != "" {
		t.Errorf("table order (-want +got):\n%s", diff)
	}
}

func TestModes(t *testing.T) {
	tests := []struct {
		mode      Mode
		backend   kernel.Backend
		iptables  bool
		proxyMode string
		flags     []string
	}{
		{IPTablesNFT, kernel.NFT, true, "iptables", []string{"--proxy-mode=iptables", "--iptables-min-sync-period=1s"}},
		{IPTablesLegacy, kernel.Legacy, true, "iptables", []string{"--proxy-mode=iptables", "--iptables-min-sync-period=1s"}},
		{NFTables, "", false, "nftables", []string{"--proxy-mode=nftables", "--iptables-min-sync-period=1s"}},
		{UserspaceRedirect, "", false, "userspace", []string{"--proxy-mode=userspace", "--userspace-portals=redirect"}},
		{UserspaceLocal, "", false, "userspace", []string{"--proxy-mode=userspace", "--userspace-portals=local"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			b, ok := tt.mode.Backend()
			if b != tt.backend || ok != tt.iptables {
				t.Errorf("Backend() = %q, %v; want %q, %v", b, ok, tt.backend, tt.iptables)
			}
			if got := tt.mode.ProxyMode(); got != tt.proxyMode {
				t.Errorf("ProxyMode() = %q, want %q", got, tt.proxyMode)
			}
			flags := ProxyFlags("/kubeconfig", tt.mode, time.Second)
			for _, f := range tt.flags {
				if !slices.Contains(flags, f) {
					t.Errorf("ProxyFlags = %q, missing %q", flags, f)
				}
			}
			if _, userspace := tt.mode.Portals(); !userspace && slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, "--userspace-portals") }) {
				t.Errorf("ProxyFlags(%q) = %q: a portal flag outside the userspace mode", tt.mode, flags)
			}
			if ok && IPTablesMode(b) != tt.mode {
				t.Errorf("IPTablesMode(%q) = %q", b, IPTablesMode(b))
			}
		})
	}
}

func TestEstimateGrowsWithSizesAndBudget(t *testing.T) {
	small := DefaultSettings()
	small.Sizes = []int{100}
	big := small
	big.Sizes = []int{100, 30000}
	longer := small
	longer.KubeProxyBudget = time.Hour
	if !(small.Estimate() < big.Estimate()) {
		t.Errorf("estimate for 100 services (%v) not below 100 and 30,000 (%v)", small.Estimate(), big.Estimate())
	}
	// Every row may spend the whole budget.
	if want := time.Duration(len(small.Rows())) * (time.Hour - small.KubeProxyBudget); longer.Estimate()-small.Estimate() != want {
		t.Errorf("a longer kube-proxy budget changed the estimate by %v, want %v", longer.Estimate()-small.Estimate(), want)
	}
}
