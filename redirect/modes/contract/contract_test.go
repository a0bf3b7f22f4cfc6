package contract

import (
	"net/netip"
	"slices"
	"testing"

	"kproxy.dev/kproxy/sync/ipfamily"
)

func TestClusterCIDRsForTheDetector(t *testing.T) {
	p := netip.MustParsePrefix
	s := Settings{ClusterCIDRs: []netip.Prefix{p("10.0.0.0/8"), p("fd00::/48")}}
	for _, tc := range []struct {
		mode string
		fam  ipfamily.Family
		want []netip.Prefix
	}{
		{"", ipfamily.IPv4, []netip.Prefix{p("10.0.0.0/8")}},
		{"ClusterCIDR", ipfamily.IPv6, []netip.Prefix{p("fd00::/48")}},
		{"NodeCIDR", ipfamily.IPv4, nil},
		{"BridgeInterface", ipfamily.IPv4, nil},
		{"InterfaceNamePrefix", ipfamily.IPv4, nil},
	} {
		t.Run(tc.mode+"/"+string(tc.fam), func(t *testing.T) {
			s := s
			s.DetectLocalMode, s.PodBridgeInterface, s.PodInterfaceNamePrefix = tc.mode, "cbr0", "veth"
			d, err := s.LocalDetector()
			if err != nil {
				t.Fatal(err)
			}
			if got := s.ClusterCIDRsFor(d, tc.fam); !slices.Equal(got, tc.want) {
				t.Errorf("ClusterCIDRsFor = %v, want %v", got, tc.want)
			}
		})
	}
}
