package options

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/lb/ports"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/nodeaddr"
)

func TestModeSettings(t *testing.T) {
	bind := netip.MustParseAddr("198.19.0.1")
	for _, tc := range []struct {
		name string
		cfg  Config
		want mode.Settings
	}{
		{
			name: "a zero minimum sync period means no limit",
			cfg: Config{
				NodeName: "n", IPTablesSyncPeriod: 30 * time.Second, IPVSMinSyncPeriod: time.Second, IPVSSyncPeriod: time.Minute,
				NFTablesMinSyncPeriod: 2 * time.Second, NFTablesSyncPeriod: time.Hour, NFTablesMasqueradeBit: 13,
			},
			want: mode.Settings{
				NodeName: "n",
				IPTables: mode.IPTablesSettings{Sync: mode.SyncPeriods{Min: -1, Max: 30 * time.Second}},
				IPVS:     mode.IPVSSettings{Sync: mode.SyncPeriods{Min: time.Second, Max: time.Minute}},
				NFTables: mode.NFTablesSettings{Sync: mode.SyncPeriods{Min: 2 * time.Second, Max: time.Hour}, MasqueradeBit: 13},
			},
		},
		{
			name: "primary carries the bind address; a port range becomes inclusive bounds; the portal kind passes",
			cfg: Config{
				BindAddress: bind, NodePortPrimary: true, PortRange: PortRange{Base: 30000, Size: 100},
				UDPIdleTimeout: time.Second, UserspacePortals: mode.PortalsLocal,
			},
			want: mode.Settings{
				NodePorts: nodeaddr.Policy{Primary: true, BindAddress: bind},
				IPTables:  mode.IPTablesSettings{Sync: mode.SyncPeriods{Min: -1}},
				IPVS:      mode.IPVSSettings{Sync: mode.SyncPeriods{Min: -1}},
				NFTables:  mode.NFTablesSettings{Sync: mode.SyncPeriods{Min: -1}},
				Userspace: mode.UserspaceSettings{PortRange: ports.Range{Lo: 30000, Hi: 30099}, UDPIdleTimeout: time.Second, Portals: mode.PortalsLocal},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.cfg.ModeSettings()
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("ModeSettings (-want +got):\n%s", diff)
			}
		})
	}
}
