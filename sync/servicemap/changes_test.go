package servicemap

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// changeSummary is the comparable part of a ChangeSet.
type changeSummary struct {
	Full                            bool
	Changed, NewlyServed            []ServicePortName
	Removed                         []ServicePortName
	Stale                           []string
	ServiceChanges, EndpointChanges int
	Triggers                        map[ServicePortName]time.Time
	Empty                           bool
}

func summarize(c *ChangeSet) changeSummary {
	s := changeSummary{Full: c.Full, Changed: c.Changed, NewlyServed: c.NewlyServed, ServiceChanges: c.ServiceChanges,
		EndpointChanges: c.EndpointChanges, Triggers: c.TriggerTimes, Empty: c.Empty()}
	for _, p := range c.Removed {
		s.Removed = append(s.Removed, p.Name)
	}
	for _, se := range c.StaleEndpoints {
		s.Stale = append(s.Stale, se.ServicePort.String()+"="+se.Endpoint.String())
	}
	return s
}

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Second)
)

func withTrigger(s *discovery.EndpointSlice, at time.Time) *discovery.EndpointSlice {
	s = s.DeepCopy()
	s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339)}
	return s
}

func bumped(s *discovery.EndpointSlice) *discovery.EndpointSlice {
	s = s.DeepCopy()
	s.ResourceVersion += "1"
	return s
}

func TestChangeSets(t *testing.T) {
	http := portName("ns", "s", "http")
	web := []discovery.EndpointPort{slicePortOf("http", 8080)}
	svc := makeService("ns", "s", "198.18.0.1")
	twoEPs := makeSlice("ns", "s-1", "s", web, ep("198.19.0.1"), ep("198.19.0.2"))
	oneEP := makeSlice("ns", "s-1", "s", web, ep("198.19.0.1"))
	secondNotServing := makeSlice("ns", "s-1", "s", web, ep("198.19.0.1"), ep("198.19.0.2", serving(false), ready(false)))
	noneServing := makeSlice("ns", "s-1", "s", web, ep("198.19.0.1", serving(false), ready(false)))
	sliceKey := types.NamespacedName{Namespace: "ns", Name: "s-1"}
	svcKey := types.NamespacedName{Namespace: "ns", Name: "s"}

	type step func(tr *Tracker)
	svcUpdate := func(s *v1.Service) step { return func(tr *Tracker) { tr.OnServiceUpdate(s) } }
	sliceUpdate := func(s *discovery.EndpointSlice) step { return func(tr *Tracker) { tr.OnEndpointSliceUpdate(s) } }

	tests := []struct {
		name  string
		setup []step // applied, then snapshotted, before events
		steps []step
		want  changeSummary
	}{{
		name:  "first snapshot is full and lists everything",
		steps: []step{svcUpdate(svc), sliceUpdate(twoEPs)},
		want: changeSummary{Full: true, Changed: []ServicePortName{http}, NewlyServed: []ServicePortName{http},
			ServiceChanges: 1, EndpointChanges: 1},
	}, {
		name:  "first snapshot of nothing is full",
		steps: nil,
		want:  changeSummary{Full: true},
	}, {
		name:  "no-op updates change nothing",
		setup: []step{svcUpdate(svc), sliceUpdate(twoEPs)},
		steps: []step{sliceUpdate(bumped(twoEPs)), svcUpdate(svc.DeepCopy())},
		want:  changeSummary{ServiceChanges: 1, EndpointChanges: 1, Empty: true},
	}, {
		name:  "ignored objects are not events",
		setup: []step{svcUpdate(svc)},
		steps: []step{svcUpdate(makeService("ns", "h", v1.ClusterIPNone)),
			sliceUpdate(makeSlice("ns", "x", "s", web, ep("198.19.0.1"))), // counts: a new slice
			func(tr *Tracker) { tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "never"}) },
			func(tr *Tracker) { tr.OnEndpointSliceDelete(types.NamespacedName{Namespace: "ns", Name: "never"}) }},
		want: changeSummary{EndpointChanges: 1, Changed: []ServicePortName{http}, NewlyServed: []ServicePortName{http}},
	}, {
		name:  "service added later",
		setup: []step{svcUpdate(makeService("ns", "other", "198.18.0.2"))},
		steps: []step{svcUpdate(svc)},
		want:  changeSummary{Changed: []ServicePortName{http}, ServiceChanges: 1},
	}, {
		name:  "endpoint removed is stale",
		setup: []step{svcUpdate(svc), sliceUpdate(twoEPs)},
		steps: []step{sliceUpdate(withTrigger(oneEP, t1)), sliceUpdate(withTrigger(bumped(oneEP), t0))},
		want: changeSummary{Changed: []ServicePortName{http}, Stale: []string{"ns/s:http/TCP=198.19.0.2:8080"},
			EndpointChanges: 2, Triggers: map[ServicePortName]time.Time{http: t0}},
	}, {
		name:  "endpoint that stops serving is stale",
		setup: []step{svcUpdate(svc), sliceUpdate(twoEPs)},
		steps: []step{sliceUpdate(secondNotServing)},
		want: changeSummary{Changed: []ServicePortName{http}, Stale: []string{"ns/s:http/TCP=198.19.0.2:8080"},
			EndpointChanges: 1},
	}, {
		name:  "endpoint that was not serving is not stale when removed",
		setup: []step{svcUpdate(svc), sliceUpdate(secondNotServing)},
		steps: []step{sliceUpdate(oneEP)},
		want:  changeSummary{Changed: []ServicePortName{http}, EndpointChanges: 1},
	}, {
		name:  "newly served",
		setup: []step{svcUpdate(svc), sliceUpdate(noneServing)},
		steps: []step{sliceUpdate(oneEP)},
		want:  changeSummary{Changed: []ServicePortName{http}, NewlyServed: []ServicePortName{http}, EndpointChanges: 1},
	}, {
		name:  "slice deleted: all endpoints stale, trigger time from the deleted slice",
		setup: []step{svcUpdate(svc), sliceUpdate(withTrigger(twoEPs, t0))},
		steps: []step{func(tr *Tracker) { tr.OnEndpointSliceDelete(sliceKey) }},
		want: changeSummary{Changed: []ServicePortName{http}, EndpointChanges: 1,
			Stale:    []string{"ns/s:http/TCP=198.19.0.1:8080", "ns/s:http/TCP=198.19.0.2:8080"},
			Triggers: map[ServicePortName]time.Time{http: t0}},
	}, {
		name:  "service deleted: removed with its endpoints stale",
		setup: []step{svcUpdate(svc), sliceUpdate(oneEP)},
		steps: []step{func(tr *Tracker) { tr.OnServiceDelete(svcKey) }},
		want: changeSummary{Changed: []ServicePortName{http}, Removed: []ServicePortName{http},
			Stale: []string{"ns/s:http/TCP=198.19.0.1:8080"}, ServiceChanges: 1},
	}, {
		name:  "service becoming headless is removed",
		setup: []step{svcUpdate(svc)},
		steps: []step{svcUpdate(makeService("ns", "s", v1.ClusterIPNone))},
		want:  changeSummary{Changed: []ServicePortName{http}, Removed: []ServicePortName{http}, ServiceChanges: 1},
	}, {
		name:  "slice losing its service label is a delete",
		setup: []step{svcUpdate(svc), sliceUpdate(oneEP)},
		steps: []step{func(tr *Tracker) {
			s := oneEP.DeepCopy()
			s.Labels = nil
			tr.OnEndpointSliceUpdate(s)
		}},
		want: changeSummary{Changed: []ServicePortName{http}, Stale: []string{"ns/s:http/TCP=198.19.0.1:8080"},
			EndpointChanges: 1},
	}, {
		name:  "service port renamed: old removed, new added",
		setup: []step{svcUpdate(svc), sliceUpdate(oneEP)},
		steps: []step{svcUpdate(makeService("ns", "s", "198.18.0.1", withPorts(
			v1.ServicePort{Name: "web", Protocol: v1.ProtocolTCP, Port: 80})))},
		want: changeSummary{Changed: []ServicePortName{http, portName("ns", "s", "web")},
			Removed: []ServicePortName{http}, Stale: []string{"ns/s:http/TCP=198.19.0.1:8080"}, ServiceChanges: 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(testNode, nil)
			if tt.setup != nil {
				for _, s := range tt.setup {
					s(tr)
				}
				tr.Snapshot()
			}
			for _, s := range tt.steps {
				s(tr)
			}
			if svcs, eps := tr.Pending(); svcs != tt.want.ServiceChanges || eps != tt.want.EndpointChanges {
				t.Errorf("Pending() = %d, %d; want %d, %d", svcs, eps, tt.want.ServiceChanges, tt.want.EndpointChanges)
			}
			_, cs := tr.Snapshot()
			if diff := cmp.Diff(tt.want, summarize(cs), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("change set (-want +got):\n%s", diff)
			}
			if svcs, eps := tr.Pending(); svcs != 0 || eps != 0 {
				t.Errorf("Pending() after Snapshot = %d, %d; want 0, 0", svcs, eps)
			}
			if (tt.want.ServiceChanges+tt.want.EndpointChanges > 0) == cs.FirstEvent.IsZero() {
				t.Errorf("FirstEvent = %v with %d events", cs.FirstEvent, tt.want.ServiceChanges+tt.want.EndpointChanges)
			}
		})
	}
}

func TestSnapshotSharingAndGenerations(t *testing.T) {
	tr := NewTracker(testNode, nil)
	web := []discovery.EndpointPort{slicePortOf("http", 8080)}
	for i := range 3 {
		name := string(rune('a' + i))
		tr.OnServiceUpdate(makeService("ns", name, vip(i)))
		tr.OnEndpointSliceUpdate(makeSlice("ns", name+"-1", name, web, ep(podIP(i))))
	}
	s1, _ := tr.Snapshot()
	tr.OnEndpointSliceUpdate(makeSlice("ns", "b-1", "b", web, ep(podIP(7))))
	s2, cs := tr.Snapshot()
	if s1.Generation != 1 || s2.Generation != 2 {
		t.Errorf("generations = %d, %d; want 1, 2", s1.Generation, s2.Generation)
	}
	if want := []ServicePortName{portName("ns", "b", "http")}; !cmp.Equal(cs.Changed, want) {
		t.Errorf("Changed = %v, want %v", cs.Changed, want)
	}
	for _, n := range []string{"a", "c"} {
		p1, _ := s1.Get(portName("ns", n, "http"))
		p2, _ := s2.Get(portName("ns", n, "http"))
		if p1 == nil || p1 != p2 {
			t.Errorf("unchanged port %s not shared between snapshots (%p, %p)", n, p1, p2)
		}
	}
	b1, _ := s1.Get(portName("ns", "b", "http"))
	b2, _ := s2.Get(portName("ns", "b", "http"))
	if b1.Endpoints[0].Addr.String() != podIP(1) || b2.Endpoints[0].Addr.String() != podIP(7) {
		t.Errorf("old snapshot changed or new one wrong: %v, %v", b1.Endpoints, b2.Endpoints)
	}
	var order []string
	for name := range s2.All() {
		order = append(order, name.Name)
	}
	if !cmp.Equal(order, []string{"a", "b", "c"}) || s2.Len() != 3 {
		t.Errorf("All() order = %v, Len = %d", order, s2.Len())
	}
	if _, ok := s2.Get(portName("ns", "zz", "http")); ok {
		t.Error("Get of a missing port succeeded")
	}
	s3, cs3 := tr.Snapshot()
	if !cs3.Empty() || s3.Generation != 3 || cs3.Full {
		t.Errorf("idle snapshot: generation %d, change set %+v", s3.Generation, cs3)
	}
}

func TestNodeTracking(t *testing.T) {
	node := func(name string, mutate func(*v1.Node)) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
			Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
				{Type: v1.NodeHostName, Address: "host"},
				{Type: v1.NodeExternalIP, Address: "198.19.9.7"},
				{Type: v1.NodeInternalIP, Address: "198.19.9.1"},
				{Type: v1.NodeExternalIP, Address: "fd00::9:1"},
				{Type: v1.NodeInternalIP, Address: "garbage"},
			}}}
		if mutate != nil {
			mutate(n)
		}
		return n
	}
	calls := 0
	tr := NewTracker(testNode, func() { calls++ })
	tr.OnNodeUpdate(node("other-node", nil))
	if snap, cs := tr.Snapshot(); snap.Node != nil || cs.NodeChanged || calls != 0 {
		t.Fatalf("another node's update was not ignored: node %+v, changed %v, calls %d", snap.Node, cs.NodeChanged, calls)
	}
	n := node(testNode, nil)
	tr.OnNodeUpdate(n)
	n.Labels["mutated"] = "after" // the tracker must have copied the labels
	snap, cs := tr.Snapshot()
	want := &NodeInfo{Name: testNode, Labels: map[string]string{"topology.kubernetes.io/zone": "z1"},
		Addresses: addrs("198.19.9.1", "198.19.9.7", "fd00::9:1")} // InternalIPs first, as kube-proxy orders them
	if diff := cmp.Diff(want, snap.Node, cmpopts.EquateComparable(addrs("0.0.0.0")[0])); diff != "" || !cs.NodeChanged || cs.Empty() {
		t.Errorf("node (-want +got):\n%s\nNodeChanged=%v", diff, cs.NodeChanged)
	}
	tr.OnNodeUpdate(node(testNode, nil))
	if _, cs := tr.Snapshot(); cs.NodeChanged {
		t.Error("identical node update reported as a change")
	}
	tr.OnNodeUpdate(node(testNode, func(n *v1.Node) { n.DeletionTimestamp = &metav1.Time{Time: t0} }))
	if snap, cs := tr.Snapshot(); !cs.NodeChanged || !snap.Node.Deleting {
		t.Errorf("deletion timestamp: changed=%v deleting=%v", cs.NodeChanged, snap.Node.Deleting)
	}
	tr.OnNodeUpdate(node(testNode, func(n *v1.Node) {
		n.DeletionTimestamp = &metav1.Time{Time: t0}
		n.Spec.Taints = []v1.Taint{{Key: "other"}, {Key: ToBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}
	}))
	if snap, cs := tr.Snapshot(); !cs.NodeChanged || !snap.Node.ToBeDeleted {
		t.Errorf("cluster autoscaler taint: changed=%v toBeDeleted=%v", cs.NodeChanged, snap.Node.ToBeDeleted)
	}
	tr.OnNodeDelete()
	if snap, cs := tr.Snapshot(); !cs.NodeChanged || snap.Node != nil {
		t.Errorf("node delete: changed=%v node=%+v", cs.NodeChanged, snap.Node)
	}
	if calls != 4 {
		t.Errorf("onChange called %d times, want 4", calls)
	}
}

func TestSyncedAndOnChange(t *testing.T) {
	calls := 0
	tr := NewTracker(testNode, func() { calls++ })
	if tr.Synced() {
		t.Fatal("synced before OnSynced")
	}
	tr.OnServiceUpdate(makeService("ns", "s", "198.18.0.1"))
	tr.OnServiceUpdate(makeService("ns", "h", v1.ClusterIPNone)) // ignored: no call
	tr.OnSynced()
	if !tr.Synced() || calls != 2 {
		t.Errorf("Synced() = %v, onChange calls = %d; want true, 2", tr.Synced(), calls)
	}
}

func TestMerge(t *testing.T) {
	a, b, c := portName("ns", "a", "p"), portName("ns", "b", "p"), portName("ns", "c", "p")
	removedB := &ServicePort{Name: b}
	staleA := StaleEndpoint{ServicePort: a, Endpoint: wantEP("198.19.0.1:80", true, true, false, false, "")}
	staleB := StaleEndpoint{ServicePort: b, Endpoint: wantEP("198.19.0.2:80", true, true, false, false, "")}
	first := &ChangeSet{
		Changed: []ServicePortName{a, b}, Removed: []*ServicePort{removedB}, StaleEndpoints: []StaleEndpoint{staleB},
		NewlyServed: []ServicePortName{a}, ServiceChanges: 1, EndpointChanges: 2, FirstEvent: t1,
		TriggerTimes: map[ServicePortName]time.Time{a: t1, b: t0},
	}
	later := &ChangeSet{
		Full: true, Changed: []ServicePortName{b, c}, StaleEndpoints: []StaleEndpoint{staleA}, NodeChanged: true,
		NewlyServed: []ServicePortName{b}, EndpointChanges: 3, FirstEvent: t1.Add(time.Second),
		TriggerTimes: map[ServicePortName]time.Time{a: t0, b: t1, c: t1},
	}
	first.Merge(later)
	want := &ChangeSet{
		Full: true, Changed: []ServicePortName{a, b, c}, Removed: []*ServicePort{removedB},
		StaleEndpoints: []StaleEndpoint{staleB, staleA}, NewlyServed: []ServicePortName{a, b}, NodeChanged: true,
		ServiceChanges: 1, EndpointChanges: 5, FirstEvent: t1,
		TriggerTimes: map[ServicePortName]time.Time{a: t0, b: t0, c: t1},
	}
	if diff := cmp.Diff(want, first, cmpopts.EquateComparable(addrs("0.0.0.0")[0])); diff != "" {
		t.Errorf("Merge (-want +got):\n%s", diff)
	}
	if later.TriggerTimes[a] != t0 || len(later.Changed) != 2 {
		t.Error("Merge modified its argument")
	}
	empty := &ChangeSet{}
	empty.Merge(&ChangeSet{FirstEvent: t0, ServiceChanges: 1})
	if !empty.Empty() || empty.FirstEvent != t0 {
		t.Errorf("merging an event-only set: empty=%v first=%v", empty.Empty(), empty.FirstEvent)
	}
}

// TestRemoveAndReAddAcrossSnapshots checks that a port removed in one change
// set and re-added in the next stays Changed after a Merge.
func TestRemoveAndReAddAcrossSnapshots(t *testing.T) {
	tr := NewTracker(testNode, nil)
	svc := makeService("ns", "s", "198.18.0.1")
	tr.OnServiceUpdate(svc)
	tr.Snapshot()
	tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "s"})
	_, first := tr.Snapshot()
	tr.OnServiceUpdate(svc)
	snap, later := tr.Snapshot()
	first.Merge(later)
	http := portName("ns", "s", "http")
	if !cmp.Equal(first.Changed, []ServicePortName{http}) || len(first.Removed) != 1 || snap.Len() != 1 {
		t.Errorf("merged: Changed=%v Removed=%d snapshot ports=%d", first.Changed, len(first.Removed), snap.Len())
	}
}
