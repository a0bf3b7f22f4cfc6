package ipvsscale

import (
	"testing"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

// checkSyncSteps runs the benchmark's steps at a small size on rig (an
// empty kernel, real or fake) and checks what they count and read back:
// every virtual server, real server, address and set member is written
// once by the full apply and is there afterwards, a one-endpoint change
// costs a handful of calls and reaches the kernel, an incremental sync with
// nothing to do makes no call, and a full resync with nothing to do only
// reads.
func checkSyncSteps(t *testing.T, rig *Rig, w Workload) {
	t.Helper()
	states := mustStates(t, w)
	want := Expected(states.Base)
	if want.VirtualServers != w.Ports || want.RealServers != w.Ports*w.Endpoints {
		t.Fatalf("the desired state holds %d virtual servers and %d real servers, want %d and %d",
			want.VirtualServers, want.RealServers, w.Ports, w.Ports*w.Endpoints)
	}

	full := mustSync(t, rig, states.Base, true)
	t.Logf("full apply of %s took %v: %s", w, full.Took, rig.Counter)
	members := 0
	for _, n := range want.SetMembers {
		members += n
	}
	for op, n := range map[string]int{
		"IPVS.NewService": want.VirtualServers, "IPVS.NewDestination": want.RealServers,
		"Link.AddAddr": want.Addresses, "IPSets.Add": members,
		"IPVS.UpdateService": 0, "IPVS.UpdateDestination": 0, "IPVS.DelDestination": 0,
		"IPVS.DelService": 0, "Link.DelAddr": 0, "IPSets.Del": 0,
	} {
		if got := rig.Counter.Calls(op); got != n {
			t.Errorf("full apply: %s called %d times, want %d (calls: %s)", op, got, n, rig.Counter)
		}
	}
	if full.Ops.Writes != want.VirtualServers+want.RealServers+want.Addresses+members {
		t.Errorf("full apply: %d writes, want one per virtual server, real server, address and set member (calls: %s)",
			full.Ops.Writes, rig.Counter)
	}
	checkInventory(t, rig, states.Base)

	for i, st := range []*desired.State{states.Changed[0], states.Changed[1], states.Changed[0]} {
		res := mustSync(t, rig, st, false)
		// One real server in, one out (TCP: weight 0, then deleted once it
		// holds no connection), and the read of connection counts.
		if res.Ops.Writes < 2 || res.Ops.Total() > 6 {
			t.Errorf("change %d: %+v handle calls (%s), want 2 to 6", i, res.Ops, rig.Counter)
		}
		checkService(t, rig, st, ChangedKey())
		t.Logf("change %d took %v: %s", i, res.Took, rig.Counter)
	}

	if res := mustSync(t, rig, states.Changed[0], false); res.Ops.Total() != 0 {
		t.Errorf("incremental sync with nothing changed made %d handle calls (%s), want none", res.Ops.Total(), rig.Counter)
	}
	resync := mustSync(t, rig, states.Changed[0], true)
	// Listings: the services, each one's real servers, the addresses, each
	// set; ensures: kube-ipvs0 and each set.
	sets := len(desired.SetSpecs(states.Base.Family))
	wantOps := Counts{Reads: 1 + want.VirtualServers + 1 + sets, Ensures: 1 + sets}
	if resync.Ops != wantOps {
		t.Errorf("full resync with nothing changed: %+v (%s), want %+v", resync.Ops, rig.Counter, wantOps)
	}
	checkInventory(t, rig, states.Changed[0])
}

// TestSyncStepsOnFakes runs the guest smoke test's checks against the fake
// kernel, so they are exercised on every host run too.
func TestSyncStepsOnFakes(t *testing.T) {
	checkSyncSteps(t, rigOver(t, newFakes().handles()), Workload{Ports: 50, Endpoints: EndpointsPerPort})
}
