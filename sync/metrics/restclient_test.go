package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// installedClientGo is the Metrics client-go reports to in this test
// process: client-go keeps the first hooks a process installs, so a second
// run of the test (-count=2) must read the first run's registry.
var installedClientGo = sync.OnceValue(func() *Metrics {
	m := New()
	m.InstallClientGo()
	return m
})

// TestRestClientMetrics: after InstallClientGo, a clientset's requests show
// in rest_client_* on this registry, with component-base's labels. The only
// test here that installs. Each run's server has a port of its own, so the
// counts it checks are its own.
func TestRestClientMetrics(t *testing.T) {
	m := installedClientGo()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","items":[]}`))
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, want := range []string{
		`rest_client_requests_total{code="200",host="` + host + `",method="GET"} 1`,
		`rest_client_request_duration_seconds_count{host="` + host + `",verb="GET"} 1`,
		`rest_client_response_size_bytes_count{host="` + host + `",verb="GET"} 1`,
		"rest_client_exec_plugin_ttl_seconds +Inf",
		"# TYPE rest_client_transport_cache_entries gauge",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
