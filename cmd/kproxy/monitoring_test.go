package main

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/syncscale"
)

// dashboardSeries is what one query of the kubernetes-mixin "Kubernetes /
// Proxy" dashboard, or of the kube-proxy alerts and recording rules, reads
// from a node proxy's /metrics. up{job="kube-proxy"} (the Up panel and
// KubeProxyDown) needs only a scrape target: the PodMonitor's test in
// bench/deploy checks that the pods are one, this test that /metrics
// answers.
type dashboardSeries struct {
	query string
	// sample is the name the query reads (a histogram's _bucket or _count).
	sample string
	// match: label → the pattern its value must match, as the query
	// selects (code=~"2..", verb="GET").
	match map[string]string
	// labels the query groups by or reads beyond match (le for
	// histogram_quantile); the instance and job labels come from the scrape.
	labels []string
	// positive: the panel plots a rate, which this test's service change
	// must have moved.
	positive bool
	// notServed, when set, says why kube-proxy v1.36.3 does not serve the
	// series either: kproxy is then held only to the comparison with it.
	notServed string
}

func dashboardQueries() []dashboardSeries {
	return []dashboardSeries{
		{query: "Rules Sync Rate: sum(rate(kubeproxy_sync_proxy_rules_duration_seconds_count[5m]))",
			sample: "kubeproxy_sync_proxy_rules_duration_seconds_count", positive: true},
		{query: "Rule Sync Latency: histogram_quantile(0.99, rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket[5m]))",
			sample: "kubeproxy_sync_proxy_rules_duration_seconds_bucket", labels: []string{"le"}, positive: true},
		{query: "Network Programming Rate: sum(rate(kubeproxy_network_programming_duration_seconds_count[5m]))",
			sample: "kubeproxy_network_programming_duration_seconds_count", positive: true},
		{query: "Network Programming Latency, and the instance variable: ... by (instance, le)",
			sample: "kubeproxy_network_programming_duration_seconds_bucket", labels: []string{"le"}, positive: true},
		{query: `Kube API Request Rate: sum(rate(rest_client_requests_total{code=~"2.."}[5m]))`,
			sample: "rest_client_requests_total", match: map[string]string{"code": "2.."}, positive: true},
		// The dashboard also groups by url, a label component-base renamed
		// to host long ago: neither proxy has it, and grouping by an absent
		// label keeps the series.
		{query: `Post Request Latency: histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{verb="POST"}[5m])) by (verb, url, le))`,
			sample: "rest_client_request_duration_seconds_bucket", match: map[string]string{"verb": "POST"}, labels: []string{"le"}, positive: true},
		{query: `Get Request Latency: histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{verb="GET"}[5m])) by (verb, url, le))`,
			sample: "rest_client_request_duration_seconds_bucket", match: map[string]string{"verb": "GET"}, labels: []string{"le"}, positive: true,
			notServed: "client-go observes request latency for plain requests only, not for the watches (counted as GETs in " +
				"rest_client_requests_total) its informers list and watch with; kube-proxy reads its Node through an informer " +
				"too and makes no plain GET, so the panel is empty for it as well. A GET kproxy made only for the panel " +
				"would leave it empty again five minutes after start (a rate over one sample)"},
		{query: "Memory: process_resident_memory_bytes", sample: "process_resident_memory_bytes", positive: true},
		{query: "CPU usage: rate(process_cpu_seconds_total[5m])", sample: "process_cpu_seconds_total", positive: true},
		{query: "Goroutines: go_goroutines", sample: "go_goroutines", positive: true},
		// kube-proxy exports the pending gauges in every mode; they are 0
		// once a sync has taken the changes.
		{query: "kubeproxy_sync_proxy_rules_endpoint_changes_pending", sample: "kubeproxy_sync_proxy_rules_endpoint_changes_pending"},
		{query: "kubeproxy_sync_proxy_rules_service_changes_pending", sample: "kubeproxy_sync_proxy_rules_service_changes_pending"},
	}
}

// restoreFailures is kube-proxy's count of failed iptables-restore runs,
// which it registers in its iptables and IPVS modes only (the nftables mode
// counts kubeproxy_sync_proxy_rules_nftables_sync_failures_total instead).
// kube-proxy shows its series from the first failure on; kproxy shows each
// family's at 0 from the start, so that increase() over it has a series to
// work on before anything failed.
const restoreFailures = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"

// dashboardService is the Service whose EndpointSlice changes while each
// proxy runs, so that network programming is observed.
const dashboardService = "dashboard"

// TestDashboardMetricsInEveryMode runs kproxy in each mode this host can
// run against a real kube-apiserver, changes a Service's endpoints once it
// has synced, and checks that every series the kubernetes-mixin "Kubernetes
// / Proxy" dashboard and the kube-proxy alerts read is exported with the
// labels those queries use. Where kube-proxy v1.36.3 runs too (iptables,
// nftables) it runs the same way, and a series it has and kproxy lacks
// fails the test.
func TestDashboardMetricsInEveryMode(t *testing.T) {
	lab.RequireRoot(t)
	bin := inNetnsWithBinary(t)
	if bin == "" {
		return
	}
	api := lab.StartAPIServer(t)
	lab.CreateNode(t, api.Client, parityNode, "198.19.0.1")
	ctx := context.Background()
	createDashboardService(ctx, t, api.Client)
	modes := []struct {
		name string
		args []string
		// kubeProxy: kube-proxy v1.36.3 has the mode, and runs it here too.
		kubeProxy bool
		// restoreFailures: the mode writes with iptables-restore and
		// exports restoreFailures, as kube-proxy's iptables mode does. The
		// userspace mode's REDIRECT portals write with it too, but
		// kube-proxy has no userspace mode any more: a failed write there
		// counts in kproxy_sync_failures_total, as in every mode.
		restoreFailures bool
	}{
		{"iptables", []string{"--proxy-mode=iptables"}, true, true},
		{"nftables", []string{"--proxy-mode=nftables"}, true, false},
		{"userspace-redirect", []string{"--proxy-mode=userspace", "--userspace-portals=redirect"}, false, false},
		{"userspace-local", []string{"--proxy-mode=userspace", "--userspace-portals=local"}, false, false},
		{"userspace-sklookup", []string{"--proxy-mode=userspace", "--userspace-portals=sklookup"}, false, false},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			args := parityArgs(api, m.args...)
			run := func(who, bin string) syncscale.Samples {
				s := runAndScrapeAfter(t, who+" "+m.name, bin, func(metrics func() (string, error)) {
					changeEndpoints(ctx, t, api.Client, metrics)
				}, args...)
				samples, err := syncscale.ParseSamples(strings.NewReader(s.bodies["/metrics"]))
				if err != nil {
					t.Fatalf("%s's /metrics: %v", who, err)
				}
				t.Logf("%s %s: API requests by method and code %v, latency by verb %v", who, m.name,
					labelSets(samples, "rest_client_requests_total", "method", "code"),
					labelSets(samples, "rest_client_request_duration_seconds_count", "verb"))
				return samples
			}
			kx := run("kproxy", bin)
			for _, miss := range missingDashboardSeries(kx) {
				t.Errorf("kproxy: %s", miss)
			}
			switch _, err := (dashboardSeries{sample: restoreFailures, labels: []string{"ip_family"}}).find(kx); {
			case m.restoreFailures && err != nil:
				t.Errorf("kproxy: %s: %v", restoreFailures, err)
			case !m.restoreFailures && err == nil:
				t.Errorf("kproxy exports %s, which kube-proxy exports only in its iptables and IPVS modes", restoreFailures)
			}
			if !m.kubeProxy {
				return
			}
			kp := run("kube-proxy", lab.KubeProxyBinary(t))
			// Else the comparison below would compare nothing.
			for _, miss := range missingDashboardSeries(kp) {
				t.Errorf("kube-proxy itself: %s", miss)
			}
			for _, q := range append(dashboardQueries(), dashboardSeries{sample: restoreFailures, labels: []string{"ip_family"}}) {
				if missing := q.lacking(kp, kx); len(missing) > 0 {
					t.Errorf("%s: kube-proxy has series kproxy lacks:\n  %s", q.sample, strings.Join(missing, "\n  "))
				}
			}
		})
	}
}

// find returns the samples q reads: named q.sample, matching q.match and
// carrying q.labels.
func (q dashboardSeries) find(samples syncscale.Samples) (syncscale.Samples, error) {
	var out syncscale.Samples
	named := 0
	for _, s := range samples {
		if s.Name != q.sample {
			continue
		}
		named++
		if q.matches(s.Labels) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no sample named %s with %v and labels %v (%d samples of that name)", q.sample, q.match, q.labels, named)
	}
	return out, nil
}

func (q dashboardSeries) matches(labels map[string]string) bool {
	for k, pattern := range q.match {
		v, ok := labels[k]
		if !ok || !regexp.MustCompile("^(?:"+pattern+")$").MatchString(v) {
			return false
		}
	}
	for _, k := range q.labels {
		if _, ok := labels[k]; !ok {
			return false
		}
	}
	return true
}

// check fails unless q's samples exist and, for a rate, one has moved.
func (q dashboardSeries) check(samples syncscale.Samples) error {
	found, err := q.find(samples)
	if err != nil {
		return err
	}
	if q.positive && !slices.ContainsFunc(found, func(s syncscale.Sample) bool { return s.Value > 0 }) {
		return fmt.Errorf("every %s sample the query reads is 0", q.sample)
	}
	return nil
}

// lacking lists the series of q in want that got lacks, each as the query
// tells them apart: by the labels it matches on and reads.
func (q dashboardSeries) lacking(want, got syncscale.Samples) []string {
	keys := func(samples syncscale.Samples) []string {
		var out []string
		for _, s := range samples {
			if s.Name != q.sample || !q.matches(s.Labels) {
				continue
			}
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(q.match)) {
				kv = append(kv, k+"="+s.Labels[k])
			}
			for _, k := range q.labels {
				kv = append(kv, k+"="+s.Labels[k])
			}
			out = append(out, q.sample+"{"+strings.Join(kv, ",")+"}")
		}
		return out
	}
	have := keys(got)
	var missing []string
	for _, k := range keys(want) {
		if !slices.Contains(have, k) && !slices.Contains(missing, k) {
			missing = append(missing, k)
		}
	}
	return missing
}

func createDashboardService(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: dashboardService, Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{
			ClusterIP: "198.18.0.10",
			Ports:     []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Service %s: %v", svc.Name, err)
	}
	name, port, proto := "http", int32(8080), v1.ProtocolTCP
	slice := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: dashboardService + "-1", Namespace: svc.Namespace,
			Labels: map[string]string{discovery.LabelServiceName: dashboardService}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"198.19.1.11"}}},
	}
	if _, err := client.DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating EndpointSlice %s: %v", slice.Name, err)
	}
}

// changeEndpoints moves the dashboard Service's endpoint to another address
// with a last-change-trigger-time of now, as the EndpointSlice controller
// would (a proxy observes network programming only for changes triggered
// after it started), and waits until the running proxy's /metrics shows
// every series the dashboard needs of it, or 60 s have passed: the checks
// that follow say what is missing. Other series come asynchronously too
// (the Starting event's POST).
func changeEndpoints(ctx context.Context, t *testing.T, client kubernetes.Interface, metrics func() (string, error)) {
	t.Helper()
	sliceAPI := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
	slice, err := sliceAPI.Get(ctx, dashboardService+"-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading EndpointSlice: %v", err)
	}
	next := map[string]string{"198.19.1.11": "198.19.1.12", "198.19.1.12": "198.19.1.11"}
	slice.Endpoints[0].Addresses = []string{next[slice.Endpoints[0].Addresses[0]]}
	if slice.Annotations == nil {
		slice.Annotations = map[string]string{}
	}
	slice.Annotations[v1.EndpointsLastChangeTriggerTime] = time.Now().UTC().Format(time.RFC3339Nano)
	if _, err := sliceAPI.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating EndpointSlice: %v", err)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		body, err := metrics()
		if err != nil {
			continue
		}
		samples, err := syncscale.ParseSamples(strings.NewReader(body))
		if err == nil && len(missingDashboardSeries(samples)) == 0 {
			return
		}
	}
}

// missingDashboardSeries lists what the dashboard needs of a proxy that
// samples lack.
func missingDashboardSeries(samples syncscale.Samples) []string {
	var missing []string
	for _, q := range dashboardQueries() {
		if q.notServed != "" {
			continue
		}
		if err := q.check(samples); err != nil {
			missing = append(missing, q.query+": "+err.Error())
		}
	}
	return missing
}

// labelSets lists the distinct values of labels among the samples named name.
func labelSets(samples syncscale.Samples, name string, labels ...string) []string {
	var out []string
	for _, s := range samples {
		if s.Name != name {
			continue
		}
		var vs []string
		for _, l := range labels {
			vs = append(vs, s.Labels[l])
		}
		if v := strings.Join(vs, " "); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// TestDashboardSeriesChecks: what check and lacking make of a few scrapes.
func TestDashboardSeriesChecks(t *testing.T) {
	post := dashboardSeries{sample: "rest_client_request_duration_seconds_bucket", match: map[string]string{"verb": "POST"},
		labels: []string{"le"}, positive: true}
	codes := dashboardSeries{sample: "rest_client_requests_total", match: map[string]string{"code": "2.."}, positive: true}
	tests := []struct {
		name      string
		q         dashboardSeries
		kproxy    string
		kubeProxy string
		checkErr  bool
		lacking   []string
	}{
		{name: "same series", q: post,
			kproxy:    `rest_client_request_duration_seconds_bucket{host="h",verb="POST",le="1"} 1`,
			kubeProxy: `rest_client_request_duration_seconds_bucket{host="h2",verb="POST",le="1"} 3`},
		{name: "another verb only", q: post, checkErr: true,
			kproxy:    `rest_client_request_duration_seconds_bucket{host="h",verb="GET",le="1"} 1`,
			kubeProxy: `rest_client_request_duration_seconds_bucket{host="h",verb="POST",le="1"} 1`,
			lacking:   []string{`rest_client_request_duration_seconds_bucket{verb=POST,le=1}`}},
		{name: "a bucket fewer", q: post,
			kproxy: `rest_client_request_duration_seconds_bucket{verb="POST",le="1"} 1`,
			kubeProxy: `rest_client_request_duration_seconds_bucket{verb="POST",le="1"} 1
rest_client_request_duration_seconds_bucket{verb="POST",le="+Inf"} 1`,
			lacking: []string{`rest_client_request_duration_seconds_bucket{verb=POST,le=+Inf}`}},
		{name: "no le", q: post, checkErr: true, kproxy: `rest_client_request_duration_seconds_bucket{verb="POST"} 1`},
		{name: "a rate that never moved", q: codes, checkErr: true, kproxy: `rest_client_requests_total{code="200",method="GET"} 0`},
		{name: "a class the query does not read", q: codes, checkErr: true, kproxy: `rest_client_requests_total{code="404",method="GET"} 2`,
			kubeProxy: `rest_client_requests_total{code="201",method="POST"} 1`, lacking: []string{`rest_client_requests_total{code=201}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parse := func(body string) syncscale.Samples {
				s, err := syncscale.ParseSamples(strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			kx, kp := parse(tt.kproxy), parse(tt.kubeProxy)
			if err := tt.q.check(kx); (err != nil) != tt.checkErr {
				t.Errorf("check: %v, want an error: %v", err, tt.checkErr)
			}
			if got := tt.q.lacking(kp, kx); !slices.Equal(got, tt.lacking) {
				t.Errorf("lacking = %q, want %q", got, tt.lacking)
			}
		})
	}
}
