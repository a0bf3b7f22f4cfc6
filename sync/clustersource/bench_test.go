package clustersource

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"kproxy.dev/kproxy/sync/servicemap/sinktest"
)

// BenchmarkInitialSync measures listing 1000 services with one slice each
// from a fake clientset into a sink, up to OnSynced.
func BenchmarkInitialSync(b *testing.B) {
	const n = 1000
	objs := make([]k8sruntime.Object, 0, 2*n)
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs,
			service(ns, name, fmt.Sprintf("198.18.%d.%d", i/250, i%250+1), nil),
			endpointSlice(ns, name+"-1", name, nil, fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)))
	}
	for b.Loop() {
		b.StopTimer()
		client := fake.NewClientset(objs...)
		sink := sinktest.New()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		b.StartTimer()
		go func() { done <- New(client, testNode, 0, sink).Run(ctx) }()
		for !sink.Synced() {
			select {
			case err := <-done:
				b.Fatalf("Run ended before sync: %v", err)
			default:
			}
			runtime.Gosched()
		}
		b.StopTimer()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if got := len(sink.PresentAtSync()); got != 2*n {
			b.Fatalf("%d objects at OnSynced, want %d", got, 2*n)
		}
		b.StartTimer()
	}
}
