package options

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/lb/ports"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/nodeaddr"
)

func TestModeSettings(t *testing.T) {
	bind := netip.MustParseAddr("198.19.0.1")
	for _, tc := range []struct {
		name string
		cfg  Config
		want contract.Settings
	}{
		{
			name: "a zero minimum sync period means no limit",
			cfg: Config{
				NodeName: "n", IPTablesSyncPeriod: 30 * time.Second, IPVSMinSyncPeriod: time.Second, IPVSSyncPeriod: time.Minute,
				NFTablesMinSyncPeriod: 2 * time.Second, NFTablesSyncPeriod: time.Hour, NFTablesMasqueradeBit: 13,
			},
			want: contract.Settings{
				NodeName: "n",
				IPTables: contract.IPTablesSettings{Sync: contract.SyncPeriods{Min: -1, Max: 30 * time.Second}},
				IPVS:     contract.IPVSSettings{Sync: contract.SyncPeriods{Min: time.Second, Max: time.Minute}},
				NFTables: contract.NFTablesSettings{Sync: contract.SyncPeriods{Min: 2 * time.Second, Max: time.Hour}, MasqueradeBit: 13},
			},
		},
		{
			name: "primary carries the bind address; a port range becomes inclusive bounds; the portal kind passes",
			cfg: Config{
				BindAddress: bind, NodePortPrimary: true, PortRange: PortRange{Base: 30000, Size: 100},
				UDPIdleTimeout: time.Second, UserspacePortals: contract.PortalsLocal,
			},
			want: contract.Settings{
				NodePorts: nodeaddr.Policy{Primary: true, BindAddress: bind},
				IPTables:  contract.IPTablesSettings{Sync: contract.SyncPeriods{Min: -1}},
				IPVS:      contract.IPVSSettings{Sync: contract.SyncPeriods{Min: -1}},
				NFTables:  contract.NFTablesSettings{Sync: contract.SyncPeriods{Min: -1}},
				Userspace: contract.UserspaceSettings{PortRange: ports.Range{Lo: 30000, Hi: 30099}, UDPIdleTimeout: time.Second, Portals: contract.PortalsLocal},
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
