package servicemap

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestConcurrentSourcesAndSnapshots has sources writing while the sync loop
// snapshots (run with -race). Every snapshot must be sorted, and once the
// sources stop, the last snapshot must equal one built from scratch from the
// same final state.
func TestConcurrentSourcesAndSnapshots(t *testing.T) {
	const services = 40
	web := []discovery.EndpointPort{slicePortOf("http", 8080)}
	tr := NewTracker(testNode, nil)
	var wg sync.WaitGroup
	done := make(chan struct{})

	// Final state per service, written by the one goroutine that owns it.
	finalSvc := make([]bool, services)
	finalEPs := make([][]int, services)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 300 {
				i := w + 4*rng.IntN(services/4)
				name := fmt.Sprintf("s%02d", i)
				switch rng.IntN(4) {
				case 0:
					tr.OnServiceUpdate(makeService("ns", name, vip(i)))
					finalSvc[i] = true
				case 1:
					tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: name})
					finalSvc[i] = false
				default:
					var eps []discovery.Endpoint
					finalEPs[i] = finalEPs[i][:0]
					for k := range rng.IntN(4) {
						eps = append(eps, ep(podIP(i*10+k), onNode(testNode)))
						finalEPs[i] = append(finalEPs[i], i*10+k)
					}
					tr.OnEndpointSliceUpdate(makeSlice("ns", name+"-1", name, web, eps...))
				}
			}
		}()
	}
	snapsDone := make(chan *ChangeSet)
	go func() {
		merged := &ChangeSet{}
		for {
			snap, cs := tr.Snapshot()
			merged.Merge(cs)
			var names []ServicePortName
			for name, p := range snap.All() {
				names = append(names, name)
				if !slices.IsSortedFunc(p.Endpoints, compareEndpointAddr) {
					t.Errorf("endpoints of %v not sorted", name)
				}
			}
			if !slices.IsSortedFunc(names, ServicePortName.Compare) {
				t.Errorf("snapshot %d not sorted", snap.Generation)
			}
			select {
			case <-done:
				snapsDone <- merged
				return
			default:
			}
		}
	}()
	wg.Wait()
	close(done)
	<-snapsDone
	last, _ := tr.Snapshot()

	fresh := NewTracker(testNode, nil)
	for i := range services {
		name := fmt.Sprintf("s%02d", i)
		if finalSvc[i] {
			fresh.OnServiceUpdate(makeService("ns", name, vip(i)))
		}
		var eps []discovery.Endpoint
		for _, k := range finalEPs[i] {
			eps = append(eps, ep(podIP(k), onNode(testNode)))
		}
		fresh.OnEndpointSliceUpdate(makeSlice("ns", name+"-1", name, web, eps...))
	}
	want, _ := fresh.Snapshot()
	if diff := cmp.Diff(snapshotPorts(want), snapshotPorts(last), cmpopts.EquateComparable(addrs("0.0.0.0")[0])); diff != "" {
		t.Errorf("incremental result differs from a fresh build (-fresh +incremental):\n%s", diff)
	}
}

func snapshotPorts(s *Snapshot) []*ServicePort {
	var out []*ServicePort
	for _, p := range s.All() {
		out = append(out, p)
	}
	return out
}

// TestApplyEdits compares the sorted-list patching against sorting from scratch.
func TestApplyEdits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	mk := func(i int) *ServicePort { return &ServicePort{Name: portName("ns", fmt.Sprintf("s%04d", i), "p")} }
	for round := range 200 {
		present := map[int]bool{}
		var prev []*ServicePort
		for i := range 60 {
			if rng.IntN(2) == 0 {
				present[i] = true
				prev = append(prev, mk(i))
			}
		}
		var removed []ServicePortName
		var added, updated []*ServicePort
		want := map[int]*ServicePort{}
		for i := range 60 {
			switch r := rng.IntN(4); {
			case present[i] && r == 0:
				removed = append(removed, mk(i).Name)
			case present[i] && r == 1:
				p := mk(i)
				updated = append(updated, p)
				want[i] = p
			case present[i]:
				want[i] = prev[slices.IndexFunc(prev, func(p *ServicePort) bool { return p.Name == mk(i).Name })]
			case r == 0:
				p := mk(i)
				added = append(added, p)
				want[i] = p
			}
		}
		prevCopy := slices.Clone(prev)
		got := applyEdits(prev, removed, added, updated)
		var wantList []*ServicePort
		for i := range 60 {
			if p, ok := want[i]; ok {
				wantList = append(wantList, p)
			}
		}
		if len(got) != len(wantList) {
			t.Fatalf("round %d: got %d ports, want %d", round, len(got), len(wantList))
		}
		for i := range got {
			if got[i] != wantList[i] {
				t.Fatalf("round %d: position %d holds %v, want %v", round, i, got[i].Name, wantList[i].Name)
			}
		}
		if !slices.Equal(prev, prevCopy) {
			t.Fatalf("round %d: applyEdits modified its input", round)
		}
	}
}
