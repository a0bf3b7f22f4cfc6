package ipvsscale

import (
	"context"
	"testing"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/fakeipvs"
)

// fakes are the fake kernel's handles, with their own call counts.
type fakes struct {
	ipvs *fakeipvs.IPVS
	link *fakeipvs.Link
	sets *fakeipvs.IPSets
}

func newFakes() fakes {
	return fakes{ipvs: &fakeipvs.IPVS{}, link: &fakeipvs.Link{}, sets: &fakeipvs.IPSets{}}
}

func (f fakes) handles() Handles { return Handles{IPVS: f.ipvs, Link: f.link, IPSets: f.sets} }

// kernelRig is a Rig over the real handles of this network namespace.
func kernelRig(tb testing.TB) *Rig {
	tb.Helper()
	rig, err := NewRig()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rig.Close)
	return rig
}

func rigOver(tb testing.TB, h Handles) *Rig {
	tb.Helper()
	rig, err := RigOver(h)
	if err != nil {
		tb.Fatal(err)
	}
	return rig
}

func mustStates(tb testing.TB, w Workload) States {
	tb.Helper()
	states, err := w.BuildStates()
	if err != nil {
		tb.Fatal(err)
	}
	return states
}

func mustSync(tb testing.TB, rig *Rig, st *desired.State, full bool) SyncResult {
	tb.Helper()
	res, err := rig.Sync(context.Background(), st, full)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// checkInventory reads the kernel back through the uncounted handles.
func checkInventory(tb testing.TB, rig *Rig, want *desired.State) {
	tb.Helper()
	got, err := ReadInventory(rig.Kernel, want)
	if err != nil {
		tb.Fatal(err)
	}
	if err := got.Diff(Expected(want)); err != nil {
		tb.Fatalf("the kernel does not hold the desired state:\n%v", err)
	}
}

func checkService(tb testing.TB, rig *Rig, want *desired.State, k desired.Key) {
	tb.Helper()
	svc, err := ServiceOf(want, k)
	if err != nil {
		tb.Fatal(err)
	}
	if err := CheckService(rig.Kernel, svc); err != nil {
		tb.Fatal(err)
	}
}
