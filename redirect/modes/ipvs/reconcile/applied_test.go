package reconcile

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

func TestRebuildApplied(t *testing.T) {
	at := func(last byte) appliedService {
		return appliedService{vs: desired.VirtualServer{Key: desired.Key{
			Addr: netip.AddrFrom4([4]byte{198, 18, 0, last}), Protocol: v1.ProtocolTCP, Port: 80}}}
	}
	list := func(lasts ...byte) []appliedService {
		var out []appliedService
		for _, l := range lasts {
			out = append(out, at(l))
		}
		return out
	}
	tests := []struct {
		name    string
		applied []appliedService
		drop    []int
		added   []appliedService
		want    []appliedService
	}{
		{"nothing", list(2, 4), nil, nil, list(2, 4)},
		{"into empty", nil, nil, list(1, 3), list(1, 3)},
		{"first, middle and last added", list(2, 4), nil, list(1, 3, 5), list(1, 2, 3, 4, 5)},
		{"first and last dropped", list(2, 4, 6), []int{0, 2}, nil, list(4)},
		{"added where one is dropped", list(2, 4, 6), []int{1}, list(3, 5), list(2, 3, 5, 6)},
		{"all dropped, others added", list(2, 4), []int{0, 1}, list(1, 5), list(1, 5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rebuildApplied(slices.Clone(tt.applied), tt.drop, tt.added)
			keys := func(as []appliedService) []desired.Key {
				var out []desired.Key
				for _, a := range as {
					out = append(out, a.vs.Key)
				}
				return out
			}
			if !slices.Equal(keys(got), keys(tt.want)) {
				t.Errorf("got %v, want %v", keys(got), keys(tt.want))
			}
		})
	}
}

func TestMissingFrom(t *testing.T) {
	tests := []struct {
		name       string
		have, want []netip.Addr
		missing    []netip.Addr
	}{
		{"same", addrs("198.18.0.1", "198.18.0.2"), addrs("198.18.0.1", "198.18.0.2"), nil},
		{"want more", addrs("198.18.0.2"), addrs("198.18.0.1", "198.18.0.2", "198.18.0.3"), nil},
		{"first and last gone", addrs("198.18.0.1", "198.18.0.2", "198.18.0.3"), addrs("198.18.0.2"), addrs("198.18.0.1", "198.18.0.3")},
		{"want nothing", addrs("198.18.0.1"), nil, addrs("198.18.0.1")},
		{"interleaved", addrs("198.18.0.1", "198.18.0.3", "198.18.0.5"), addrs("198.18.0.2", "198.18.0.3", "198.18.0.4"), addrs("198.18.0.1", "198.18.0.5")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := missingFrom(tt.have, tt.want); !slices.Equal(got, tt.missing) {
				t.Errorf("missingFrom = %v, want %v", got, tt.missing)
			}
		})
	}
}
