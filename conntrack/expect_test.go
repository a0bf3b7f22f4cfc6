package conntrack

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/sync/ipfamily"
)

func TestExpectationsOf(t *testing.T) {
	snap := snapshot(1,
		port("dual", udp, 53, "198.18.0.20", "fd00:18::20").external("198.18.5.20").nodePort(30054).
			serving("198.19.1.11:9000", "[fd00:19:1::11]:9000").notServing("198.19.1.12:9000"),
		port("empty", udp, 53, "198.18.0.21"),
		port("web", tcp, 80, "198.18.0.40").serving("198.19.1.11:8080"),
		port("assoc", sctp, 7777, "198.18.0.30").serving("198.19.1.11:7777"),
	)
	tests := []struct {
		fam  ipfamily.Family
		want *Expectations
	}{
		{ipfamily.IPv4, &Expectations{Dataplane: KernelNAT, Endpoints: map[Destination][]netip.AddrPort{
			ServiceAddress(ap("198.18.0.20:53")): {ap("198.19.1.11:9000")},
			ServiceAddress(ap("198.18.5.20:53")): {ap("198.19.1.11:9000")},
			NodePortOf(ipfamily.IPv4, 30054):     {ap("198.19.1.11:9000")},
			ServiceAddress(ap("198.18.0.21:53")): nil,
		}}},
		{ipfamily.IPv6, &Expectations{Dataplane: KernelNAT, Endpoints: map[Destination][]netip.AddrPort{
			ServiceAddress(ap("[fd00:18::20]:53")): {ap("[fd00:19:1::11]:9000")},
			NodePortOf(ipfamily.IPv6, 30054):       {ap("[fd00:19:1::11]:9000")},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.fam.String(), func(t *testing.T) {
			got := ExpectationsOf(snap, tt.fam, KernelNAT, nil)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
				cmp.Comparer(func(a, b Destination) bool { return a == b })); diff != "" {
				t.Errorf("expectations (-want +got):\n%s", diff)
			}
		})
	}
	if got := ExpectationsOf(snapshot(1, port("web", tcp, 80, "198.18.0.40")), ipfamily.IPv4, KernelNAT, nil); got != nil {
		t.Errorf("expectations without any UDP port: %+v, want nil", got)
	}
}
