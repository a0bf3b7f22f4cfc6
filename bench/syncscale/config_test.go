package syncscale

import (
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
			env: map[string]string{SizesEnv: "100, 1000,5000,10000,30000,1000", BackendsEnv: "legacy",
				KubeProxyBudgetEnv: "15m", MinSyncPeriodEnv: "0s", NPLRepeatsEnv: "9"},
			want: func(s *Settings) {
				s.Sizes = []int{100, 1000, 5000, 10000, 30000}
				s.Backends = []kernel.Backend{kernel.Legacy}
				s.KubeProxyBudget = 15 * time.Minute
				s.MinSyncPeriod = 0
				s.NPLRepeats = 9
			},
		},
		{
			name: "every bad value reported",
			env: map[string]string{SizesEnv: "100,lots", BackendsEnv: "nft,ipvs", KubeProxyBudgetEnv: "0s",
				KproxyBudgetEnv: "soon", NPLRepeatsEnv: "0"},
			wantErr: []string{SizesEnv, BackendsEnv, KubeProxyBudgetEnv, KproxyBudgetEnv, NPLRepeatsEnv},
		},
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

func TestRowsRunSizeBySize(t *testing.T) {
	s := Settings{Sizes: []int{100, 5000}, Backends: []kernel.Backend{kernel.NFT, kernel.Legacy}}
	var names []string
	for _, r := range s.Rows() {
		names = append(names, r.Name())
	}
	if diff := cmp.Diff([]string{"nft-100", "legacy-100", "nft-5000", "legacy-5000"}, names); diff != "" {
		t.Errorf("row order (-want +got):\n%s", diff)
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
