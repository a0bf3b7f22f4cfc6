package ipvsscale

import (
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestCountMatchesTheFakesOwnCounts: after a full apply, a change and a
// full resync, the decorators have tallied exactly the calls each fake saw.
func TestCountMatchesTheFakesOwnCounts(t *testing.T) {
	f := newFakes()
	rig := rigOver(t, f.handles())
	states := mustStates(t, Workload{Ports: 20, Endpoints: 3})
	rig.Counter.Reset()
	for _, step := range []struct {
		st   *desired.State
		full bool
	}{{states.Base, true}, {states.Changed[0], false}, {states.Changed[0], true}} {
		if _, err := rig.rec.Sync(t.Context(), step.st, step.full); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for prefix, fakeOps := range map[string]map[string]int{"IPVS.": f.ipvs.Ops(), "Link.": f.link.Ops(), "IPSets.": f.sets.Ops()} {
		for op, n := range fakeOps {
			if got := rig.Counter.Calls(prefix + op); got != n {
				t.Errorf("%s%s: counted %d calls, the fake saw %d", prefix, op, got, n)
			}
			total += n
		}
	}
	if got := rig.Counter.Counts().Total(); got != total {
		t.Errorf("Counts().Total() = %d, the fakes saw %d calls", got, total)
	}
}

// TestCountsByKind: each method lands in its kind, Reset forgets, and
// String lists the calls sorted.
func TestCountsByKind(t *testing.T) {
	f := newFakes()
	h, c := Count(f.handles())
	vs := desired.VirtualServer{Key: desired.Key{Addr: VIP(0), Protocol: "TCP", Port: 80}, Scheduler: "rr"}
	svc := handles.ToService(vs)
	dest := handles.ToDestination(desired.RealServer{Addr: netip.MustParseAddr("198.19.1.1"), Port: 8080, Weight: 1})
	spec := desired.SetSpecs(ipfamily.IPv4)[0]
	calls := []struct {
		name string
		call func() error
		kind string
	}{
		{"IPVS.NewService", func() error { return h.IPVS.NewService(svc) }, Write},
		{"IPVS.NewDestination", func() error { return h.IPVS.NewDestination(svc, dest) }, Write},
		{"IPVS.GetServices", func() error { _, err := h.IPVS.GetServices(); return err }, Read},
		{"IPVS.GetDestinations", func() error { _, err := h.IPVS.GetDestinations(svc); return err }, Read},
		{"IPVS.UpdateDestination", func() error { return h.IPVS.UpdateDestination(svc, dest) }, Write},
		{"IPVS.DelDestination", func() error { return h.IPVS.DelDestination(svc, dest) }, Write},
		{"IPVS.UpdateService", func() error { return h.IPVS.UpdateService(svc) }, Write},
		{"IPVS.DelService", func() error { return h.IPVS.DelService(svc) }, Write},
		{"IPVS.Flush", func() error { return h.IPVS.Flush() }, Write},
		{"Link.EnsureLink", func() error { return h.Link.EnsureLink() }, Ensure},
		{"Link.AddAddr", func() error { return h.Link.AddAddr(VIP(0)) }, Write},
		{"Link.Addrs", func() error { _, err := h.Link.Addrs(); return err }, Read},
		{"Link.DelAddr", func() error { return h.Link.DelAddr(VIP(0)) }, Write},
		{"Link.DeleteLink", func() error { return h.Link.DeleteLink() }, Write},
		{"IPSets.Create", func() error { return h.IPSets.Create(spec) }, Ensure},
		{"IPSets.List", func() error { _, err := h.IPSets.List(spec.Name); return err }, Read},
		{"IPSets.Destroy", func() error { return h.IPSets.Destroy(spec.Name) }, Write},
	}
	for _, tc := range calls {
		before := c.Counts()
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		after := c.Counts()
		grew := map[string]int{Read: after.Reads - before.Reads, Ensure: after.Ensures - before.Ensures, Write: after.Writes - before.Writes}
		for kind, d := range grew {
			want := 0
			if kind == tc.kind {
				want = 1
			}
			if d != want {
				t.Errorf("%s: %s count grew by %d, want %d", tc.name, kind, d, want)
			}
		}
		if got := c.Calls(tc.name); got != 1 {
			t.Errorf("Calls(%q) = %d, want 1", tc.name, got)
		}
	}
	if got, want := c.Counts().Total(), len(calls); got != want {
		t.Errorf("Total = %d, want %d", got, want)
	}
	if got := c.String(); !strings.HasPrefix(got, "IPSets.Create=1 IPSets.Destroy=1 IPSets.List=1 IPVS.DelDestination=1") {
		t.Errorf("String() = %q, want the calls sorted by name", got)
	}
	c.Reset()
	if got := c.Counts(); got != (Counts{}) || c.String() != "" {
		t.Errorf("after Reset: %+v %q, want nothing", got, c.String())
	}
}

// TestCountPassesErrorsThrough: the decorators return the handle's error
// untouched, so the reconciler classifies the kernel's answers as before.
func TestCountPassesErrorsThrough(t *testing.T) {
	h, c := Count(newFakes().handles())
	missing := handles.ToService(desired.VirtualServer{Key: desired.Key{Addr: VIP(1), Protocol: "TCP", Port: 80}, Scheduler: "rr"})
	if err := h.IPVS.DelService(missing); !handles.IsNoService(err) {
		t.Errorf("DelService of a missing service: %v, want the kernel's ESRCH", err)
	}
	if _, err := h.IPSets.List("KUBE-NO-SUCH-SET"); !handles.IsNotFound(err) {
		t.Errorf("List of a missing set: %v, want ENOENT", err)
	}
	if got := c.Counts().Total(); got != 2 {
		t.Errorf("failed calls counted %d times, want 2 (a failed request is still a request)", got)
	}
}
