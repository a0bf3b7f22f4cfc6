package syncscale

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// bulkWorkers is how many creates are in flight at once: enough to keep
// kube-apiserver and etcd busy on both cores without queueing thousands of
// requests in client-go.
const bulkWorkers = 32

// BulkClient is a clientset for creating many objects fast: protobuf, and
// no client-side rate limit (the lab API server is the test's own).
func BulkClient(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0 // a negative QPS turns client-go's limiter off
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("creating the bulk clientset: %w", err)
	}
	return client, nil
}

// CreateBulk creates bulk services 0…n-1 and their EndpointSlices with
// bulkWorkers concurrent workers (each service before its slice, as the
// EndpointSlice controller would), and returns how long it took. The first
// failure stops the others and is returned, naming the object.
func CreateBulk(ctx context.Context, client kubernetes.Interface, n int) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(bulkWorkers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := createOne(ctx, client, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return time.Since(start), err
	}
	return time.Since(start), nil
}

func createOne(ctx context.Context, client kubernetes.Interface, i int) error {
	svc, slice := BulkService(i)
	if _, err := client.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating service %s/%s (%s): %w", Namespace, svc.Name, svc.Spec.ClusterIP, err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating endpoint slice %s/%s: %w", Namespace, slice.Name, err)
	}
	return nil
}
