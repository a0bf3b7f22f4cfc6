package servicemap

import (
	"slices"
	"testing"
)

// TestServiceCIDRs checks that snapshots carry the sorted union of the
// ServiceCIDR objects' ranges, and that a change of it is reported as
// NodeChanged (it changes node-wide rules) while a no-op update is not.
func TestServiceCIDRs(t *testing.T) {
	calls := 0
	tr := NewTracker("node-a", func() { calls++ })
	tr.OnSynced()
	tr.Snapshot()
	steps := []struct {
		do          func()
		want        []string
		nodeChanged bool
	}{
		{func() { tr.OnServiceCIDRUpdate("kubernetes", []string{"fd00:18::/64", "198.18.0.0/16"}) }, []string{"198.18.0.0/16", "fd00:18::/64"}, true},
		{func() { tr.OnServiceCIDRUpdate("kubernetes", []string{"198.18.0.0/16", "fd00:18::/64"}) }, []string{"198.18.0.0/16", "fd00:18::/64"}, false},
		{func() { tr.OnServiceCIDRUpdate("extra", []string{"198.20.0.1/24", "bogus"}) }, []string{"198.18.0.0/16", "198.20.0.0/24", "fd00:18::/64"}, true},
		{func() { tr.OnServiceCIDRDelete("kubernetes") }, []string{"198.20.0.0/24"}, true},
		{func() { tr.OnServiceCIDRDelete("nothing") }, []string{"198.20.0.0/24"}, false},
	}
	for i, st := range steps {
		st.do()
		snap, cs := tr.Snapshot()
		var got []string
		for _, p := range snap.ServiceCIDRs {
			got = append(got, p.String())
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("step %d: ServiceCIDRs = %v, want %v", i, got, st.want)
		}
		if cs.NodeChanged != st.nodeChanged {
			t.Errorf("step %d: NodeChanged = %v, want %v", i, cs.NodeChanged, st.nodeChanged)
		}
	}
	if calls < 4 {
		t.Errorf("onChange called %d times, want at least 4", calls)
	}
}
