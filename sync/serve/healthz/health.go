// Package healthz reports whether the proxy is keeping up with changes, the
// way kube-proxy's /healthz and /livez do, and serves those endpoints along
// with /metrics.
package healthz

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
)

// Health tracks queued and applied updates. The proxy is healthy while no
// update is pending or the oldest pending one is younger than the health
// timeout; /healthz additionally needs this node to be eligible for traffic.
type Health struct {
	clock   clock.PassiveClock
	timeout time.Duration
	healthz *prometheus.CounterVec
	livez   *prometheus.CounterVec

	mu            sync.Mutex
	lastUpdated   time.Time
	oldestPending time.Time // zero when nothing is pending
	nodeEligible  bool
	conflicts     mode.ConflictReporter
}

// New returns a Health with the given timeout (kube-proxy uses twice the sync
// period) counting responses into m. A nil clock means the wall clock; a nil
// m means responses are not counted.
func New(healthTimeout time.Duration, m *metrics.Metrics, clk clock.PassiveClock) *Health {
	if clk == nil {
		clk = clock.RealClock{}
	}
	h := &Health{clock: clk, timeout: healthTimeout, nodeEligible: true}
	if m != nil {
		h.healthz, h.livez = m.HealthzTotal, m.LivezTotal
	}
	return h
}

// QueuedUpdate records that a change arrived that a sync must still apply.
// Only the oldest pending change matters, so later calls do nothing until
// Updated.
func (h *Health) QueuedUpdate() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.oldestPending.IsZero() {
		h.oldestPending = h.clock.Now()
	}
}

// Updated records that a sync applied everything queued so far.
func (h *Health) Updated() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.oldestPending = time.Time{}
	h.lastUpdated = h.clock.Now()
}

// SetNodeEligible says whether this node should receive traffic: false once
// its Node object is being deleted, so load balancers drain it.
func (h *Health) SetNodeEligible(eligible bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nodeEligible = eligible
}

// ReportPortalConflicts makes /healthz list the service addresses r says
// other sockets hold. They do not change the status code: kube-proxy's
// reports whether the proxy keeps up, which it does for every other
// service, and a load balancer draining the node would not free them.
func (h *Health) ReportPortalConflicts(r mode.ConflictReporter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conflicts = r
}

// Status is a point-in-time health report; its JSON form is the response
// body of /healthz and /livez, with kube-proxy's field names.
type Status struct {
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// NodeEligible is only reported by /healthz.
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Healthy is the sync health alone, without node eligibility.
	Healthy bool `json:"healthy"`
	// PortalConflicts (kproxy's, only in /healthz and only when not zero)
	// counts the service addresses another socket on the node held at the
	// last sync; PortalConflictsHeld names the first few.
	PortalConflicts     int      `json:"portalConflicts,omitempty"`
	PortalConflictsHeld []string `json:"portalConflictsHeld,omitempty"`
}

// Status reports the current sync health.
func (h *Health) Status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	return Status{
		LastUpdated: h.lastUpdated,
		CurrentTime: now,
		Healthy:     h.oldestPending.IsZero() || now.Sub(h.oldestPending) < h.timeout,
	}
}

// NodeEligible reports the last SetNodeEligible value (true initially).
func (h *Health) NodeEligible() bool {
	eligible, _ := h.nodeState()
	return eligible
}

// nodeState reads, under one lock, what /healthz adds to Status: whether the
// node is eligible and who reports portal conflicts (nil: nobody).
func (h *Health) nodeState() (eligible bool, conflicts mode.ConflictReporter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodeEligible, h.conflicts
}

// HealthzHandler serves /healthz: 200 when in sync and the node is eligible,
// 503 otherwise.
func (h *Health) HealthzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := h.Status()
		eligible, conflicts := h.nodeState()
		st.NodeEligible = &eligible
		if conflicts != nil {
			st.PortalConflicts, st.PortalConflictsHeld = conflicts.PortalConflicts()
		}
		h.respond(w, r, st, st.Healthy && eligible, h.healthz)
	})
}

// LivezHandler serves /livez: like /healthz but blind to node eligibility, so
// a draining node is not restarted.
func (h *Health) LivezHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := h.Status()
		h.respond(w, r, st, st.Healthy, h.livez)
	})
}

func (h *Health) respond(w http.ResponseWriter, r *http.Request, st Status, ok bool, counter *prometheus.CounterVec) {
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
		// Older kube-proxies reported the last loop run as lastUpdated, so
		// clients read a recent value as "healthy"; kube-proxy keeps that
		// meaning by reporting now, and so do we.
		st.LastUpdated = st.CurrentTime
	}
	if counter != nil {
		counter.WithLabelValues(strconv.Itoa(code)).Inc()
	}
	body, err := json.Marshal(st)
	if err != nil {
		klog.ErrorS(err, "Encoding health status", "path", r.URL.Path)
		http.Error(w, "encoding health status", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
