package healthz

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"kproxy.dev/kproxy/sync/metrics"
)

var t0 = time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)

const timeout = 60 * time.Second

// body mirrors the JSON kube-proxy's endpoints return.
type body struct {
	LastUpdated  string `json:"lastUpdated"`
	CurrentTime  string `json:"currentTime"`
	NodeEligible *bool  `json:"nodeEligible"`
	Healthy      *bool  `json:"healthy"`
}

func get(t *testing.T, h http.Handler, path string) (int, body) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s Content-Type %q", path, ct)
	}
	var b body
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("%s body %q: %v", path, rec.Body.String(), err)
	}
	return rec.Code, b
}

func TestHealthTransitions(t *testing.T) {
	type action func(h *Health, clk *clocktesting.FakeClock)
	queued := func(h *Health, _ *clocktesting.FakeClock) { h.QueuedUpdate() }
	updated := func(h *Health, _ *clocktesting.FakeClock) { h.Updated() }
	wait := func(d time.Duration) action { return func(_ *Health, clk *clocktesting.FakeClock) { clk.Step(d) } }
	nodeEligible := func(e bool) action { return func(h *Health, _ *clocktesting.FakeClock) { h.SetNodeEligible(e) } }

	tests := []struct {
		name        string
		actions     []action
		wantHealthz int
		wantLivez   int
	}{
		{"before any update", nil, 200, 200},
		{"queued, within the timeout", []action{queued, wait(timeout - time.Second)}, 200, 200},
		{"queued, not applied within the timeout", []action{queued, wait(timeout)}, 503, 503},
		{"later queues do not reset the oldest pending", []action{queued, wait(40 * time.Second), queued, wait(20 * time.Second)}, 503, 503},
		{"healthy again after Updated", []action{queued, wait(2 * timeout), updated}, 200, 200},
		{"applied long ago, nothing pending", []action{queued, updated, wait(10 * timeout)}, 200, 200},
		{"queued after an update, late", []action{updated, wait(time.Hour), queued, wait(timeout)}, 503, 503},
		{"node being deleted fails only healthz", []action{nodeEligible(false)}, 503, 200},
		{"node being deleted and late", []action{nodeEligible(false), queued, wait(timeout)}, 503, 503},
		{"node eligible again", []action{nodeEligible(false), nodeEligible(true)}, 200, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			m := metrics.New()
			h := New(timeout, m, clk)
			for _, a := range tt.actions {
				a(h, clk)
			}
			code, b := get(t, h.HealthzHandler(), "/healthz")
			if code != tt.wantHealthz {
				t.Errorf("/healthz = %d, want %d (body %+v)", code, tt.wantHealthz, b)
			}
			if b.NodeEligible == nil {
				t.Error("/healthz body lacks nodeEligible")
			}
			code, b = get(t, h.LivezHandler(), "/livez")
			if code != tt.wantLivez {
				t.Errorf("/livez = %d, want %d (body %+v)", code, tt.wantLivez, b)
			}
			if b.NodeEligible != nil {
				t.Error("/livez body reports nodeEligible; only /healthz should")
			}
			for _, c := range []struct {
				name string
				got  float64
				want int
			}{
				{"healthz", testutil.ToFloat64(m.HealthzTotal.WithLabelValues(itoa(tt.wantHealthz))), 1},
				{"livez", testutil.ToFloat64(m.LivezTotal.WithLabelValues(itoa(tt.wantLivez))), 1},
				{"healthz other code", testutil.ToFloat64(m.HealthzTotal.WithLabelValues(itoa(other(tt.wantHealthz)))), 0},
			} {
				if c.got != float64(c.want) {
					t.Errorf("%s counter = %v, want %d", c.name, c.got, c.want)
				}
			}
		})
	}
}

func itoa(code int) string {
	if code == 200 {
		return "200"
	}
	return "503"
}

func other(code int) int {
	if code == 200 {
		return 503
	}
	return 200
}

func TestBodyFields(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	h := New(timeout, nil, clk)
	h.Updated()
	clk.Step(time.Minute)
	h.QueuedUpdate()
	clk.Step(timeout + 5*time.Second)

	// Unhealthy: lastUpdated is the real last update.
	code, b := get(t, h.HealthzHandler(), "/healthz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz = %d, want 503", code)
	}
	now := t0.Add(time.Minute + timeout + 5*time.Second)
	wantLast := t0.Format(time.RFC3339)
	if b.LastUpdated != wantLast || b.CurrentTime != now.Format(time.RFC3339) {
		t.Errorf("body times = %q/%q, want %q/%q", b.LastUpdated, b.CurrentTime, wantLast, now.Format(time.RFC3339))
	}
	if b.NodeEligible == nil || !*b.NodeEligible || b.Healthy == nil || *b.Healthy {
		t.Errorf("body = %+v, want nodeEligible true, healthy false", b)
	}

	// Healthy: lastUpdated reads as now, as kube-proxy reports it.
	h.Updated()
	clk.Step(time.Second)
	code, b = get(t, h.LivezHandler(), "/livez")
	if code != http.StatusOK {
		t.Fatalf("/livez = %d, want 200", code)
	}
	now = now.Add(time.Second)
	if b.LastUpdated != now.Format(time.RFC3339) || b.CurrentTime != now.Format(time.RFC3339) {
		t.Errorf("body times = %q/%q, want both %q", b.LastUpdated, b.CurrentTime, now.Format(time.RFC3339))
	}
	for _, s := range []string{b.LastUpdated, b.CurrentTime} {
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			t.Errorf("time %q is not RFC3339: %v", s, err)
		}
	}
}

// conflicts is a mode.ConflictReporter with fixed answers.
type conflicts struct {
	count int
	shown []string
}

func (c conflicts) PortalConflicts() (int, []string) { return c.count, c.shown }

// TestHealthzReportsPortalConflicts: /healthz names the service addresses
// another socket holds, beside kube-proxy's fields and without changing
// its status; with none, or no reporter, the body is kube-proxy's alone.
// /livez never carries them.
func TestHealthzReportsPortalConflicts(t *testing.T) {
	held := []string{"TCP 198.18.0.10:80 of ns/web:http/TCP held by uid 65534 (socket inode 4242 bound to 0.0.0.0:80)"}
	for _, tc := range []struct {
		name     string
		reporter *conflicts
		wantKeys []string
	}{
		{"no reporter", nil, []string{"lastUpdated", "currentTime", "nodeEligible", "healthy"}},
		{"no conflicts", &conflicts{}, []string{"lastUpdated", "currentTime", "nodeEligible", "healthy"}},
		{"conflicts", &conflicts{count: 3, shown: held}, []string{"lastUpdated", "currentTime", "nodeEligible", "healthy", "portalConflicts", "portalConflictsHeld"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(timeout, metrics.New(), clocktesting.NewFakeClock(t0))
			if tc.reporter != nil {
				h.ReportPortalConflicts(*tc.reporter)
			}
			for _, path := range []string{"/healthz", "/livez"} {
				handler := h.HealthzHandler()
				want := tc.wantKeys
				if path == "/livez" {
					handler, want = h.LivezHandler(), []string{"lastUpdated", "currentTime", "healthy"}
				}
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != http.StatusOK {
					t.Errorf("%s = %d, want 200", path, rec.Code)
				}
				var fields map[string]json.RawMessage
				if err := json.Unmarshal(rec.Body.Bytes(), &fields); err != nil {
					t.Fatal(err)
				}
				if len(fields) != len(want) {
					t.Errorf("%s body %s, want exactly the fields %v", path, rec.Body, want)
				}
				for _, k := range want {
					if _, ok := fields[k]; !ok {
						t.Errorf("%s body %s lacks %q", path, rec.Body, k)
					}
				}
				if path == "/healthz" && tc.reporter != nil && tc.reporter.count > 0 {
					var b struct {
						PortalConflicts     int      `json:"portalConflicts"`
						PortalConflictsHeld []string `json:"portalConflictsHeld"`
					}
					_ = json.Unmarshal(rec.Body.Bytes(), &b)
					if b.PortalConflicts != 3 || len(b.PortalConflictsHeld) != 1 || b.PortalConflictsHeld[0] != held[0] {
						t.Errorf("/healthz body %s, want portalConflicts 3 naming %q", rec.Body, held[0])
					}
				}
			}
		})
	}
}
