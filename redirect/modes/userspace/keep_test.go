package userspace

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/lb/nodepods"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestKeptSourcesServiceSet: the service addresses the keeper's views hold
// are made again only when one came or went, not at every sync, and not
// at all while no pod prefix needs them.
func TestKeptSourcesServiceSet(t *testing.T) {
	k := &keptSources{keeper: keepsource.New(nil)}
	tr := servicemap.NewTracker("node-a", nil)
	links := []netip.Prefix{netip.MustParsePrefix("198.19.1.1/24")}
	pods := &nodepods.Set{Known: []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24")}, Detector: []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24")}}
	sync := func(pods *nodepods.Set) {
		snap, changes := tr.Snapshot()
		k.update(snap, changes, changes.Full, nil, links, pods)
	}
	has := func(want ...string) {
		t.Helper()
		if len(k.serviceSet) != len(want) {
			t.Fatalf("service set %v, want %v", k.serviceSet, want)
		}
		for _, a := range want {
			if !k.serviceSet[netip.MustParseAddr(a)] {
				t.Fatalf("service set %v lacks %s", k.serviceSet, a)
			}
		}
	}
	tr.OnServiceUpdate(service("a", "198.18.0.1", v1.ProtocolTCP, 0))
	tr.OnSynced()
	sync(pods)
	has("198.18.0.1")
	first := k.serviceSet

	tr.OnEndpointSliceUpdate(slice("a", v1.ProtocolTCP, "198.19.1.10"))
	sync(pods)
	if !samePointer(first, k.serviceSet) {
		t.Error("an endpoint change made the service set again")
	}

	tr.OnServiceUpdate(service("b", "198.18.0.2", v1.ProtocolTCP, 0))
	sync(pods)
	has("198.18.0.1", "198.18.0.2")
	if samePointer(first, k.serviceSet) {
		t.Error("a new service address changed the set a view already holds")
	}
	if !first[netip.MustParseAddr("198.18.0.1")] || len(first) != 1 {
		t.Errorf("the earlier set changed to %v", first)
	}

	sync(&nodepods.Set{})
	if k.serviceSet != nil {
		t.Errorf("service set %v kept with no pods to need it", k.serviceSet)
	}
	tr.OnServiceUpdate(service("c", "198.18.0.3", v1.ProtocolTCP, 0))
	sync(&nodepods.Set{})
	tr.OnEndpointSliceUpdate(slice("c", v1.ProtocolTCP, "198.19.1.11"))
	sync(pods)
	has("198.18.0.1", "198.18.0.2", "198.18.0.3")
}
