package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"kproxy.dev/kproxy/sync/buildinfo"
	"kproxy.dev/kproxy/sync/ipfamily"
)

func TestNamesTypesAndHelp(t *testing.T) {
	m := New()
	// Touch the labelled vectors so they are exported.
	m.HealthzTotal.WithLabelValues("200")
	m.LivezTotal.WithLabelValues("503")
	m.SyncDuration.Observe(1)
	m.SyncLastTimestamp.Set(1)
	m.LastQueuedTimestamp.Set(1)
	m.NetworkProgrammingDuration.Observe(1)
	m.NoLocalEndpoints.WithLabelValues("internal", "IPv4").Set(0)
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range families {
		got[f.GetName()] = f
	}
	tests := []struct {
		name string
		typ  dto.MetricType
		help string
	}{
		{"kubeproxy_sync_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, "SyncProxyRules latency in seconds"},
		{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", dto.MetricType_GAUGE, "The last time proxy rules were successfully synced"},
		{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", dto.MetricType_GAUGE, "The last time a sync of proxy rules was queued"},
		{"kubeproxy_network_programming_duration_seconds", dto.MetricType_HISTOGRAM, "In Cluster Network Programming Latency in seconds"},
		{"kubeproxy_sync_proxy_rules_service_changes_total", dto.MetricType_COUNTER, "Cumulative proxy rules Service changes"},
		{"kubeproxy_sync_proxy_rules_service_changes_pending", dto.MetricType_GAUGE, "Pending proxy rules Service changes"},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_total", dto.MetricType_COUNTER, "Cumulative proxy rules Endpoint changes"},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", dto.MetricType_GAUGE, "Pending proxy rules Endpoint changes"},
		{"kubeproxy_proxy_healthz_total", dto.MetricType_COUNTER, "Cumulative proxy healthz HTTP status"},
		{"kubeproxy_proxy_livez_total", dto.MetricType_COUNTER, "Cumulative proxy livez HTTP status"},
		{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", dto.MetricType_GAUGE, "Number of services with a Local traffic policy and no endpoints"},
		{"kubernetes_build_info", dto.MetricType_GAUGE, ""},
		{"registered_metrics_total", dto.MetricType_COUNTER, ""},
		{"go_sched_goroutines_goroutines", dto.MetricType_GAUGE, ""},
		{"kproxy_sync_failures_total", dto.MetricType_COUNTER, ""},
		{"kproxy_event_to_sync_duration_seconds", dto.MetricType_HISTOGRAM, ""},
		{"kproxy_service_ports", dto.MetricType_GAUGE, ""},
		{"kproxy_endpoints", dto.MetricType_GAUGE, ""},
		{"go_goroutines", dto.MetricType_GAUGE, ""},
		{"process_start_time_seconds", dto.MetricType_GAUGE, ""},
	}
	for _, tt := range tests {
		f, ok := got[tt.name]
		if !ok {
			t.Errorf("%s is not registered", tt.name)
			continue
		}
		if f.GetType() != tt.typ {
			t.Errorf("%s has type %v, want %v", tt.name, f.GetType(), tt.typ)
		}
		if tt.help != "" && f.GetHelp() != "[ALPHA] "+tt.help {
			t.Errorf("%s has help %q, want %q", tt.name, f.GetHelp(), tt.help)
		}
	}
}

func TestBuckets(t *testing.T) {
	m := New()
	tests := []struct {
		name       string
		h          prometheus.Collector
		wantCount  int
		wantBounds map[int]float64 // index -> upper bound
	}{
		{"sync duration", m.SyncDuration, 15, map[int]float64{0: 0.001, 1: 0.002, 14: 16.384}},
		// component-base's MergeBuckets, which kube-proxy uses, adds a 0 bucket.
		{"network programming", m.NetworkProgrammingDuration, 1 + 2 + 59 + 12 + 7,
			map[int]float64{0: 0, 1: 0.25, 2: 0.5, 3: 1, 61: 59, 62: 60, 73: 115, 74: 120, 80: 300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.h.(interface{ Observe(float64) }).Observe(1)
			ch := make(chan prometheus.Metric, 2)
			tt.h.Collect(ch)
			close(ch)
			var out dto.Metric
			if err := (<-ch).Write(&out); err != nil {
				t.Fatal(err)
			}
			buckets := out.GetHistogram().GetBucket()
			if len(buckets) != tt.wantCount {
				t.Fatalf("%d buckets, want %d", len(buckets), tt.wantCount)
			}
			for i, want := range tt.wantBounds {
				if got := buckets[i].GetUpperBound(); got < want*0.999999 || got > want*1.000001 || (want == 0 && got != 0) {
					t.Errorf("bucket %d upper bound %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestRegistriesAreIndependent(t *testing.T) {
	a, b := New(), New()
	a.SyncFailuresTotal.Inc()
	if got := testutil.ToFloat64(b.SyncFailuresTotal); got != 0 {
		t.Errorf("second instance sees %v failures from the first", got)
	}
	// Extra collectors go on the instance's own registry.
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "kproxy_test_extra_total", Help: "test"})
	if err := a.Registry().Register(extra); err != nil {
		t.Fatalf("registering an extra collector: %v", err)
	}
	if err := b.Registry().Register(extra); err != nil {
		t.Fatalf("the same collector on a second registry: %v", err)
	}
}

func TestHandlerServesExpositionFormat(t *testing.T) {
	m := New(ipfamily.IPv4, ipfamily.IPv6)
	m.ServiceChangesTotal.Add(3)
	m.SyncDuration.Observe(0.5)
	m.HealthzTotal.WithLabelValues("503").Inc()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		"kubeproxy_sync_proxy_rules_service_changes_total 3",
		`kubeproxy_proxy_healthz_total{code="503"} 1`,
		"go_goroutines ",
		`kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1`,
		`kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"} 1`,
		"# HELP kubeproxy_sync_proxy_rules_service_changes_total [ALPHA] Cumulative proxy rules Service changes",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestBuildInfoMatchesVersion: kubernetes_build_info carries the version
// and revision `kproxy --version` prints.
func TestBuildInfoMatchesVersion(t *testing.T) {
	m := New()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	info := buildinfo.Get()
	for _, f := range families {
		if f.GetName() != "kubernetes_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["git_version"] != info.GitVersion || labels["git_commit"] != info.GitCommit || labels["go_version"] != info.GoVersion {
			t.Errorf("kubernetes_build_info labels %v, want git_version %q git_commit %q", labels, info.GitVersion, info.GitCommit)
		}
		return
	}
	t.Fatal("kubernetes_build_info is not registered")
}

// TestSLIs: /metrics/slis serves, as kube-proxy's does, the process start
// time and component-base's health-check SLI families (with no samples).
func TestSLIs(t *testing.T) {
	m := New()
	rec := httptest.NewRecorder()
	m.SLIHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/slis", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "process_start_time_seconds ") {
		t.Errorf("/metrics/slis = %d %q, want 200 with process_start_time_seconds", rec.Code, rec.Body.String())
	}
}
