package rules

import (
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestHiddenExternalIPsKeepThePortAccessible: with AllowServiceExternalIPs
// off, a port reachable from outside only through its (hidden) external IP
// keeps its external chain and cluster chain, as kube-proxy's
// ExternallyAccessible still counts the IP, and gets no element for the IP.
// The same port without the IP has neither chain.
func TestHiddenExternalIPsKeepThePortAccessible(t *testing.T) {
	b, err := New(Config{Family: ipfamily.IPv4, MasqueradeBit: 14, ClusterCIDRs: testkit.Prefixes("198.19.1.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		hidden []netip.Addr
		want   bool
	}{
		{"with a hidden external IP", []netip.Addr{netip.MustParseAddr("198.18.100.2")}, true},
		{"without", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := testkit.Port("default", "external-only", 80, "198.18.0.19", testkit.InternalLocal(),
				testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1.12:8080", testkit.Local)))
			sp.HiddenExternalIPs = tc.hidden
			p, err := b.ForPort(sp)
			if err != nil {
				t.Fatal(err)
			}
			var chains []string
			hasExternal := false
			for _, c := range p.Chains {
				chains = append(chains, c.Name)
				hasExternal = hasExternal || strings.HasPrefix(c.Name, ExternalPrefix)
			}
			if hasExternal != tc.want {
				t.Errorf("external chain present = %v, want %v: %v", hasExternal, tc.want, chains)
			}
			for _, e := range p.Elements {
				if strings.Contains(strings.Join(e.Key, " "), "198.18.100.2") {
					t.Errorf("an element for the hidden external IP: %+v", e)
				}
			}
		})
	}
}
