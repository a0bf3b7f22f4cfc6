package filesource

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/servicemap/sinktest"
)

// BenchmarkReloadUnchanged measures one re-read of a 500-service file that
// did not change: what every periodic resync and spurious event costs.
func BenchmarkReloadUnchanged(b *testing.B) {
	benchmarkReload(b, 500, false)
}

// BenchmarkReloadOneEdit measures a re-read after one service changed.
func BenchmarkReloadOneEdit(b *testing.B) {
	benchmarkReload(b, 500, true)
}

func benchmarkReload(b *testing.B, n int, edit bool) {
	var objs []runtime.Object
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs, service("bench", name, fmt.Sprintf("198.18.%d.%d", i/250, i%250+1), 80),
			endpointSlice("bench", name+"-1", name, fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)))
	}
	base := yamlDocs(b, objs...)
	objs[0] = service("bench", "svc-0", "198.18.0.1", 81)
	alt := yamlDocs(b, objs...)
	dir := b.TempDir()
	writeFile(b, dir, "bench.yaml", base)
	sink := sinktest.New()
	src, err := New(dir, "n", sink, nil)
	if err != nil {
		b.Fatal(err)
	}
	logger := klog.Background()
	src.reload(logger)
	b.ResetTimer()
	for i := range b.N {
		if edit {
			b.StopTimer()
			if i%2 == 0 {
				writeFile(b, dir, "bench.yaml", alt)
			} else {
				writeFile(b, dir, "bench.yaml", base)
			}
			b.StartTimer()
		}
		src.reload(logger)
	}
	b.StopTimer()
	if sink.Take(); len(src.Errors()) > 0 {
		b.Fatal(src.Errors())
	}
}
