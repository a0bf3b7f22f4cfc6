package healthz

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
)

func fetch(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// serve runs s until the test ends and checks it shut down cleanly.
func serve(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve after cancel: %v", err)
			}
		case <-time.After(10 * time.Second): // deadlock guard
			t.Error("Serve did not return after its context was cancelled")
		}
	})
}

func TestMetricsServer(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	m := metrics.New()
	s, err := NewMetricsServer(MetricsServerConfig{
		Address: "127.0.0.1:0", Metrics: m,
		ProxyMode: mode.IPTables, Configz: []byte(`{"mode":"iptables"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	base := "http://" + s.Addr().String()

	tests := []struct {
		path         string
		wantCode     int
		wantType     string
		wantContains string
	}{
		{"/proxyMode", 200, "text/plain; charset=utf-8", "iptables"},
		{"/configz", 200, "application/json", `{"mode":"iptables"}`},
		// kube-proxy's metrics port: the generic ping, no /livez; the
		// proxy's health is on the healthz port.
		{"/healthz", 200, "text/plain; charset=utf-8", "ok"},
		{"/healthz?verbose", 200, "text/plain; charset=utf-8", "[+]ping ok\nhealthz check passed\n"},
		{"/healthz?verbose&exclude=ping", 200, "text/plain; charset=utf-8", "[+]ping excluded: ok\nhealthz check passed\n"},
		{"/healthz/ping", 200, "", "ok"},
		{"/livez", 404, "", ""},
		{"/metrics", 200, "", "# TYPE go_goroutines gauge"},
		// The pings above are health-check SLIs.
		{"/metrics/slis", 200, "", `kubernetes_healthchecks_total{name="ping",status="success",type="healthz"} 2`},
		{"/nothing", 404, "", ""},
		// Only served when given.
		{"/services", 404, "", ""},
	}
	for _, tt := range tests {
		code, ctype, b := fetch(t, base+tt.path)
		if code != tt.wantCode {
			t.Errorf("%s: status %d, want %d", tt.path, code, tt.wantCode)
		}
		if tt.wantType != "" && ctype != tt.wantType {
			t.Errorf("%s: Content-Type %q, want %q", tt.path, ctype, tt.wantType)
		}
		if !strings.Contains(b, tt.wantContains) {
			t.Errorf("%s: body %q lacks %q", tt.path, b, tt.wantContains)
		}
	}
	if _, _, b := fetch(t, base+"/metrics"); strings.Contains(b, "kubeproxy_proxy_healthz_total{") {
		t.Error("/metrics counts the metrics port's /healthz pings as proxy health probes")
	}
	if code, _, _ := fetch(t, base+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ answered %d without --profiling, want 404", code)
	}
}

func TestMetricsServerServices(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	s, err := NewMetricsServer(MetricsServerConfig{
		Address: "127.0.0.1:0", Metrics: metrics.New(), ProxyMode: mode.IPTables,
		Services: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("page " + r.URL.RawQuery)) }),
	})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	if code, _, body := fetch(t, "http://"+s.Addr().String()+"/services?format=text"); code != 200 || body != "page format=text" {
		t.Errorf("/services = %d %q, want the handler's page", code, body)
	}
}

func TestMetricsServerProfiling(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	m := metrics.New()
	s, err := NewMetricsServer(MetricsServerConfig{
		Address: "127.0.0.1:0", Metrics: m, ProxyMode: mode.IPTables, Profiling: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	code, _, body := fetch(t, "http://"+s.Addr().String()+"/debug/pprof/goroutine?debug=1")
	if code != 200 || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("/debug/pprof/goroutine with --profiling = %d %.80q, want 200 and a goroutine profile", code, body)
	}
}

func TestHealthServer(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	h := New(time.Minute, nil, nil)
	h.SetNodeEligible(false)
	s, err := NewHealthServer("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	base := "http://" + s.Addr().String()
	if code, _, b := fetch(t, base+"/healthz"); code != 503 || !strings.Contains(b, `"nodeEligible":false`) {
		t.Errorf("/healthz = %d %q, want 503 with nodeEligible false", code, b)
	}
	if code, _, _ := fetch(t, base+"/livez"); code != 200 {
		t.Errorf("/livez = %d, want 200", code)
	}
	if code, _, _ := fetch(t, base+"/metrics"); code != 404 {
		t.Errorf("/metrics on the health server = %d, want 404", code)
	}
}

func TestListenErrorNamesAddress(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	h := New(time.Minute, nil, nil)
	first, err := NewHealthServer("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	addr := first.Addr().String()

	tests := []struct {
		name string
		new  func() (*Server, error)
	}{
		{"health server", func() (*Server, error) { return NewHealthServer(addr, h) }},
		{"metrics server", func() (*Server, error) {
			return NewMetricsServer(MetricsServerConfig{Address: addr, Metrics: metrics.New()})
		}},
	}
	for _, tt := range tests {
		s, err := tt.new()
		if err == nil {
			s.Close()
			t.Errorf("%s: listening on %s, already in use, succeeded", tt.name, addr)
			continue
		}
		if !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: error %q does not name %s", tt.name, err, addr)
		}
	}
}

func TestConstructorsRejectMissingParts(t *testing.T) {
	if _, err := NewHealthServer("127.0.0.1:0", nil); err == nil {
		t.Error("NewHealthServer accepted a nil Health")
	}
	if _, err := NewMetricsServer(MetricsServerConfig{Address: "127.0.0.1:0"}); err == nil {
		t.Error("NewMetricsServer accepted no Metrics")
	}
}
