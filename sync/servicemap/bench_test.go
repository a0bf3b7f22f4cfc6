package servicemap

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"
)

var benchSizes = []struct{ ports, endpoints int }{
	{1000, 3}, {1000, 10}, {1000, 100}, {10000, 3}, {10000, 10}, {10000, 100},
}

// benchTracker returns a tracker fed ports services with one port and one
// EndpointSlice of endpoints endpoints each, plus the slices it was fed.
func benchTracker(b *testing.B, ports, endpoints int) (*Tracker, []*discovery.EndpointSlice) {
	b.Helper()
	tr := NewTracker(testNode, nil)
	web := []discovery.EndpointPort{slicePortOf("http", 8080)}
	eslices := make([]*discovery.EndpointSlice, ports)
	for i := range ports {
		name := fmt.Sprintf("svc-%05d", i)
		tr.OnServiceUpdate(makeService("bench", name, vip(i)))
		eps := make([]discovery.Endpoint, endpoints)
		for k := range endpoints {
			eps[k] = ep(podIP((i*endpoints+k)%60000), onNode(fmt.Sprintf("node-%d", k%5)))
		}
		eslices[i] = makeSlice("bench", name+"-abcde", name, web, eps...)
		tr.OnEndpointSliceUpdate(eslices[i])
	}
	return tr, eslices
}

// BenchmarkFullSnapshot measures building the first snapshot of a map (the
// target is under 100 ms for 10,000 ports × 10 endpoints).
func BenchmarkFullSnapshot(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("ports=%d/endpoints=%d", size.ports, size.endpoints), func(b *testing.B) {
			b.ReportAllocs()
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				tr, _ := benchTracker(b, size.ports, size.endpoints)
				runtime.GC() // collect the setup's garbage outside the timed region
				b.StartTimer()
				start := processCPU()
				if snap, _ := tr.Snapshot(); snap.Len() != size.ports {
					b.Fatalf("snapshot has %d ports", snap.Len())
				}
				cpu += processCPU() - start
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkIncrementalSnapshot measures one EndpointSlice change followed by
// Snapshot (the target is under 1 ms for 10,000 ports).
func BenchmarkIncrementalSnapshot(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("ports=%d/endpoints=%d", size.ports, size.endpoints), func(b *testing.B) {
			tr, eslices := benchTracker(b, size.ports, size.endpoints)
			tr.Snapshot()
			// Alternate two versions of one slice so every round is a real change.
			changed := eslices[size.ports/2].DeepCopy()
			changed.Endpoints[0].Conditions.Ready = ptr(false)
			versions := []*discovery.EndpointSlice{changed, eslices[size.ports/2]}
			b.ReportAllocs()
			i := 0
			start := processCPU()
			for b.Loop() {
				tr.OnEndpointSliceUpdate(versions[i%2])
				i++
				if _, cs := tr.Snapshot(); len(cs.Changed) != 1 {
					b.Fatalf("changed %v", cs.Changed)
				}
			}
			b.ReportMetric(float64((processCPU()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time the process (all threads, GC included) has used.
// The build machine is shared, so wall-clock ns/op swings with other load;
// cpu-ns/op shows the work done.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
