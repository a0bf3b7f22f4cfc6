package syncscale

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/lab"
)

// TestCreateBulk creates services through a real API server and reads them
// back; creating them again must fail, naming an object.
func TestCreateBulk(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	api := lab.StartAPIServer(t)
	client, err := BulkClient(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 60
	if _, err := CreateBulk(ctx, client, n); err != nil {
		t.Fatal(err)
	}
	svcs, err := api.Client.CoreV1().Services(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, s := range svcs.Items {
		byName[s.Name] = s.Spec.ClusterIP
	}
	for i := range n {
		if got := byName[ServiceName(i)]; got != ServiceIP(i).String() {
			t.Errorf("service %s has ClusterIP %q, want %s", ServiceName(i), got, ServiceIP(i))
		}
	}
	if len(byName) != n+1 { // and the default "kubernetes" service
		t.Errorf("%d services in %s, want %d", len(byName), Namespace, n+1)
	}
	slices, err := api.Client.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + ServiceName(n-1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 1 || len(slices.Items[0].Endpoints) != EndpointsPerSlice ||
		slices.Items[0].Endpoints[EndpointsPerSlice-1].Addresses[0] != EndpointIP(n-1, EndpointsPerSlice-1).String() {
		t.Errorf("slices of %s: %+v", ServiceName(n-1), slices.Items)
	}

	// The API refuses the duplicate (its ClusterIP is taken, or its name).
	_, err = CreateBulk(ctx, client, n)
	if err == nil || !strings.Contains(err.Error(), "creating service default/svc-") || !(apierrors.IsInvalid(err) || apierrors.IsAlreadyExists(err)) {
		t.Errorf("creating the services again = %v, want the API's refusal naming a service", err)
	}
}
