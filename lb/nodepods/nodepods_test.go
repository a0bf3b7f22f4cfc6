package nodepods

import (
	"net/netip"
	"testing"
)

func TestContains(t *testing.T) {
	a := netip.MustParseAddr
	asked := map[netip.Addr]int{}
	set := &Set{
		Known:    []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24")},
		Detector: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16"), netip.MustParsePrefix("fd00:19::/48")},
		Direct: func(x netip.Addr) bool {
			asked[x]++
			return x == a("198.19.6.7") || x == a("fd00:19::7")
		},
	}
	for _, tc := range []struct {
		name string
		set  *Set
		addr netip.Addr
		want bool
	}{
		{"known at the sync", set, a("198.19.1.5"), true},
		{"IPv4-mapped", set, a("::ffff:198.19.1.5"), true},
		{"a pod routed directly, come since", set, a("198.19.6.7"), true},
		{"the same pod again, from the cache", set, a("198.19.6.7"), true},
		{"IPv6, routed directly", set, a("fd00:19::7"), true},
		{"another node's pod", set, a("198.19.9.9"), false},
		{"outside the detector's prefixes: never asked", set, a("198.18.0.1"), false},
		{"no way to ask", &Set{Detector: set.Detector}, a("198.19.6.7"), false},
		{"no set", nil, a("198.19.1.5"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.set.Contains(tc.addr); got != tc.want {
				t.Errorf("Contains(%v) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
	if asked[a("198.19.6.7")] != 1 {
		t.Errorf("the routes were asked about 198.19.6.7 %d times, want once (then cached)", asked[a("198.19.6.7")])
	}
	if asked[a("198.18.0.1")] != 0 || asked[a("198.19.1.5")] != 0 {
		t.Errorf("the routes were asked about addresses the detector or the sync answered: %v", asked)
	}
}

// A client making up source addresses costs a lookup each, within a
// bounded cache.
func TestCacheIsBounded(t *testing.T) {
	set := &Set{Detector: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Direct: func(netip.Addr) bool { return false }}
	a := netip.MustParseAddr("10.0.0.0")
	for range 3 * maxCached {
		a = a.Next()
		set.Contains(a)
	}
	if n := len(set.direct); n > maxCached {
		t.Errorf("%d answers cached, want at most %d", n, maxCached)
	}
}
