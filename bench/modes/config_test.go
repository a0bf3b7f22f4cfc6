package modes

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	"kproxy.dev/kproxy/bench/syncscale"
)

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		check   func(Config) bool
		wantErr string
	}{
		{name: "defaults", check: func(c Config) bool {
			return reflect.DeepEqual(c.Sizes, []int{1, 1000, 10000}) && reflect.DeepEqual(c.Modes, HostModes()) && c.Guest &&
				c.Repeats == 2 && c.RunSeconds == 2 && c.Endpoints == 10
		}},
		{name: "sizes sorted and deduplicated", env: map[string]string{EnvSizes: "10000, 1,1000,1"},
			check: func(c Config) bool { return reflect.DeepEqual(c.Sizes, []int{1, 1000, 10000}) }},
		{name: "modes in table order", env: map[string]string{EnvModes: "kube-proxy-nftables,kproxy-userspace-redirect"},
			check: func(c Config) bool {
				return reflect.DeepEqual(c.Modes, []string{ModeUserspaceRedirect, ModeKubeProxyNFTables})
			}},
		{name: "guest off", env: map[string]string{EnvGuest: "off", EnvGuestSizes: "5"},
			check: func(c Config) bool { return !c.Guest && reflect.DeepEqual(c.GuestSizes, []int{5}) }},
		{name: "durations", env: map[string]string{EnvRunSeconds: "0.5", EnvRepeats: "3", EnvNewServices: "4"},
			check: func(c Config) bool {
				return c.RunFor() == 500*time.Millisecond && c.Repeats == 3 && c.NewServiceRepeats == 4
			}},
		{name: "size zero", env: map[string]string{EnvSizes: "0"}, wantErr: EnvSizes},
		{name: "size too large", env: map[string]string{EnvSizes: "70000"}, wantErr: "from 1 to 63000"},
		{name: "size not a number", env: map[string]string{EnvGuestSizes: "1k"}, wantErr: EnvGuestSizes},
		{name: "unknown mode", env: map[string]string{EnvModes: "ipvs"}, wantErr: `"ipvs" is not a host mode`},
		{name: "IPVS is the guest's", env: map[string]string{EnvModes: ModeKproxyIPVS}, wantErr: "not a host mode"},
		{name: "run too short", env: map[string]string{EnvRunSeconds: "0"}, wantErr: EnvRunSeconds},
		{name: "repeats zero", env: map[string]string{EnvRepeats: "0"}, wantErr: EnvRepeats},
		{name: "guest maybe", env: map[string]string{EnvGuest: "maybe"}, wantErr: "want on or off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ConfigFromEnv(func(k string) string { return tt.env[k] })
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case !tt.check(c):
				t.Errorf("config %+v", c)
			}
		})
	}
}

func TestHostModes(t *testing.T) {
	for _, id := range HostModes() {
		m, err := hostModeOf(id)
		if err != nil {
			t.Fatal(err)
		}
		_, userspace := m.Mode.Portals()
		if kube := m.Proxy == syncscale.KubeProxy; kube == strings.HasPrefix(id, "kproxy-") || (userspace && kube) {
			t.Errorf("%s runs %s in %s", id, m.Proxy, m.Mode)
		}
	}
	if _, err := hostModeOf(ModeKproxyIPVS); err == nil {
		t.Errorf("the IPVS mode is a host mode")
	}
	order := runOrder(HostModes())
	if order[len(order)-1] != ModeKproxyIPTablesLegacy || len(order) != len(HostModes()) {
		t.Errorf("run order %v: want every mode once, kproxy's legacy iptables last", order)
	}
}

func TestSkipReason(t *testing.T) {
	userspace, _ := hostModeOf(ModeUserspaceLocal)
	nft, _ := hostModeOf(ModeKproxyNFTables)
	steered, _ := hostModeOf(ModeUserspaceSKLookup)
	tests := []struct {
		mode     hostMode
		services int
		skip     bool
	}{
		{userspace, 1, false},
		{userspace, 1000, false},
		{userspace, 5000, false},
		{userspace, 10000, true}, // 3 descriptors per port: 30,000 > 20,000
		{nft, 10000, false},
		{steered, 10000, false}, // a few sockets whatever the number of services
		{steered, 30000, false},
	}
	for _, tt := range tests {
		got := skipReason(tt.mode, tt.services, 20000, 2)
		if (got != "") != tt.skip {
			t.Errorf("skipReason(%s, %d) = %q, want skip %v", tt.mode.ID, tt.services, got, tt.skip)
		}
	}
}

func TestProgress(t *testing.T) {
	start := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	now := start
	var out bytes.Buffer
	p := &Progress{Out: &out, Started: start, Total: 10 * time.Minute, Now: func() time.Time { return now }}
	if got := p.Left(); got != 10*time.Minute {
		t.Errorf("Left at the start = %v, want the estimate", got)
	}
	// Twice as slow as estimated: what is left is scaled up.
	now = start.Add(4 * time.Minute)
	p.Step(2 * time.Minute)
	if got := p.Left(); got != 16*time.Minute {
		t.Errorf("Left = %v, want 16m (8m estimated left, running 2x slow)", got)
	}
	p.Printf("%s services: %s", benchtable.Thousands(10000), ModeKproxyNFTables)
	if want := "bench-modes 13:04:00 [4m0s elapsed, about 16m0s left] 10,000 services: kproxy-nftables\n"; out.String() != want {
		t.Errorf("progress line %q, want %q", out.String(), want)
	}
	def := Plan{Config: DefaultConfig(), NoFile: 20000, Loops: 2}
	if total := def.Total(); total > 30*time.Minute || total < 10*time.Minute {
		t.Errorf("the default run is estimated at %v: the issue wants under 30 minutes", total)
	}
}
