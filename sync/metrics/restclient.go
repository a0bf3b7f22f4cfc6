package metrics

import (
	"context"
	"math"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	clientgometrics "k8s.io/client-go/tools/metrics"
	k8smetrics "k8s.io/component-base/metrics"
)

// restClient are client-go's rest_client_* metrics, under the names, labels
// and buckets of component-base's restclient package, which kube-proxy links
// and which registers them on the process-wide legacy registry instead.
type restClient struct {
	requestLatency, resolverLatency, requestSize, responseSize, rateLimiterLatency *k8smetrics.HistogramVec
	requestResult, requestRetry, execCalls, execPolicyCalls                        *k8smetrics.CounterVec
	transportCreateCalls, transportCAReloads, transportCacheGCCalls                *k8smetrics.CounterVec
	certRotation                                                                   *k8smetrics.Histogram
	certTTL                                                                        k8smetrics.GaugeFunc
	transportCacheEntries                                                          *k8smetrics.Gauge
	transportCertRotationGCCalls                                                   *k8smetrics.Counter

	certExpiry atomic.Pointer[time.Time]
}

func newRestClient() *restClient {
	latency := []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	sizes := []float64{64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216}
	hist := func(name, help string, buckets []float64, labels ...string) *k8smetrics.HistogramVec {
		return k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{Name: name, Help: help, Buckets: buckets, StabilityLevel: k8smetrics.ALPHA}, labels)
	}
	counter := func(name, help string, labels ...string) *k8smetrics.CounterVec {
		return k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{Name: name, Help: help, StabilityLevel: k8smetrics.ALPHA}, labels)
	}
	r := &restClient{
		requestLatency:     hist("rest_client_request_duration_seconds", "Request latency in seconds. Broken down by verb, and host.", latency, "verb", "host"),
		resolverLatency:    hist("rest_client_dns_resolution_duration_seconds", "DNS resolver latency in seconds. Broken down by host.", latency[:11], "host"),
		requestSize:        hist("rest_client_request_size_bytes", "Request size in bytes. Broken down by verb and host.", sizes, "verb", "host"),
		responseSize:       hist("rest_client_response_size_bytes", "Response size in bytes. Broken down by verb and host.", sizes, "verb", "host"),
		rateLimiterLatency: hist("rest_client_rate_limiter_duration_seconds", "Client side rate limiter latency in seconds. Broken down by verb, and host.", latency, "verb", "host"),
		requestResult:      counter("rest_client_requests_total", "Number of HTTP requests, partitioned by status code, method, and host.", "code", "method", "host"),
		requestRetry:       counter("rest_client_request_retries_total", "Number of request retries, partitioned by status code, verb, and host.", "code", "verb", "host"),
		execCalls: counter("rest_client_exec_plugin_call_total", "Number of calls to an exec plugin, partitioned by the type of event encountered "+
			"(no_error, plugin_execution_error, plugin_not_found_error, client_internal_error) and an optional exit code. "+
			"The exit code will be set to 0 if and only if the plugin call was successful.", "code", "call_status"),
		execPolicyCalls: counter("rest_client_exec_plugin_policy_call_total", "Number of comparisons of an exec plugin to the plugin policy "+
			"and allowlist (if any), partitioned by whether or not the policy permits the plugin", "allowed", "denied"),
		transportCreateCalls: counter("rest_client_transport_create_calls_total", "Number of calls to get a new transport, partitioned by the result of the operation "+
			"hit: obtained from the cache, miss: created and added to the cache, miss-gc: recreated and added back to the cache after being garbage collected, uncacheable: created and not cached", "result"),
		transportCAReloads: counter("rest_client_transport_ca_reload_total", "Number of times a CA reload is attempted, partitioned by the result and reason for the reload attempt", "result", "reason"),
		transportCacheGCCalls: counter("rest_client_transport_cache_gc_calls_total",
			"Number of times a GC cleanup attempts to delete a transport cache entry, partitioned by the result: deleted, skipped", "result"),
		certRotation: k8smetrics.NewHistogram(&k8smetrics.HistogramOpts{
			Name: "rest_client_exec_plugin_certificate_rotation_age",
			Help: "Histogram of the number of seconds the last auth exec plugin client certificate lived before being rotated. " +
				"If auth exec plugin client certificates are unused, histogram will contain no data.",
			// 10 and 30 minutes, 1 and 4 hours, 1 day, 1 week, 1, 3 and 6 months, 1 and 4 years.
			Buckets:        []float64{600, 1800, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000},
			StabilityLevel: k8smetrics.ALPHA,
		}),
		transportCacheEntries: k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
			Name: "rest_client_transport_cache_entries", Help: "Number of transport entries in the internal cache.", StabilityLevel: k8smetrics.ALPHA,
		}),
		transportCertRotationGCCalls: k8smetrics.NewCounter(&k8smetrics.CounterOpts{
			Name:           "rest_client_transport_cert_rotation_gc_calls_total",
			Help:           "Number of times a cert rotation goroutine cancel func is called via GC cleanup of the associated transport",
			StabilityLevel: k8smetrics.ALPHA,
		}),
	}
	r.certTTL = k8smetrics.NewGaugeFunc(&k8smetrics.GaugeOpts{
		Name: "rest_client_exec_plugin_ttl_seconds",
		Help: "Gauge of the shortest TTL (time-to-live) of the client certificate(s) managed by the auth exec plugin. " +
			"The value is in seconds until certificate expiry (negative if already expired). " +
			"If auth exec plugins are unused or manage no TLS certificates, the value will be +INF.",
		StabilityLevel: k8smetrics.ALPHA,
	}, func() float64 {
		if e := r.certExpiry.Load(); e != nil {
			return time.Until(*e).Seconds()
		}
		return math.Inf(1)
	})
	return r
}

func (r *restClient) register(reg k8smetrics.KubeRegistry) {
	// As component-base does, the DNS resolver histogram is declared but
	// not registered.
	reg.MustRegister(r.requestLatency, r.requestSize, r.responseSize, r.rateLimiterLatency, r.requestResult, r.requestRetry,
		r.certRotation, r.execCalls, r.transportCacheEntries, r.transportCreateCalls, r.transportCAReloads,
		r.transportCertRotationGCCalls, r.transportCacheGCCalls)
	reg.RawMustRegister(r.certTTL)
	Create(r.resolverLatency, r.execPolicyCalls)
}

// install makes client-go report to r (see Metrics.InstallClientGo).
func (r *restClient) install() {
	clientgometrics.Register(clientgometrics.RegisterOpts{
		ClientCertExpiry:             expiryFunc(func(e *time.Time) { r.certExpiry.Store(e) }),
		ClientCertRotationAge:        durationFunc(func(d time.Duration) { r.certRotation.Observe(d.Seconds()) }),
		RequestLatency:               latencyVec{r.requestLatency},
		ResolverLatency:              resolverVec{r.resolverLatency},
		RequestSize:                  sizeVec{r.requestSize},
		ResponseSize:                 sizeVec{r.responseSize},
		RateLimiterLatency:           latencyVec{r.rateLimiterLatency},
		RequestResult:                resultVec{r.requestResult},
		RequestRetry:                 retryVec{r.requestRetry},
		ExecPluginCalls:              execCalls{r.execCalls},
		ExecPluginPolicyCalls:        labelCounter{r.execPolicyCalls},
		TransportCacheEntries:        intGauge{r.transportCacheEntries},
		TransportCreateCalls:         labelCounter{r.transportCreateCalls},
		TransportCAReloads:           caReloads{r.transportCAReloads},
		TransportCertRotationGCCalls: plainCounter{r.transportCertRotationGCCalls},
		TransportCacheGCCalls:        labelCounter{r.transportCacheGCCalls},
	})
}

type expiryFunc func(*time.Time)

func (f expiryFunc) Set(e *time.Time) { f(e) }

type durationFunc func(time.Duration)

func (f durationFunc) Observe(d time.Duration) { f(d) }

type latencyVec struct{ m *k8smetrics.HistogramVec }

func (l latencyVec) Observe(ctx context.Context, verb string, u url.URL, d time.Duration) {
	l.m.WithContext(ctx).WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

type resolverVec struct{ m *k8smetrics.HistogramVec }

func (l resolverVec) Observe(ctx context.Context, host string, d time.Duration) {
	l.m.WithContext(ctx).WithLabelValues(host).Observe(d.Seconds())
}

type sizeVec struct{ m *k8smetrics.HistogramVec }

func (s sizeVec) Observe(ctx context.Context, verb, host string, size float64) {
	s.m.WithContext(ctx).WithLabelValues(verb, host).Observe(size)
}

type resultVec struct{ m *k8smetrics.CounterVec }

func (r resultVec) Increment(ctx context.Context, code, method, host string) {
	r.m.WithContext(ctx).WithLabelValues(code, method, host).Inc()
}

type retryVec struct{ m *k8smetrics.CounterVec }

func (r retryVec) IncrementRetry(ctx context.Context, code, method, host string) {
	r.m.WithContext(ctx).WithLabelValues(code, method, host).Inc()
}

type execCalls struct{ m *k8smetrics.CounterVec }

func (e execCalls) Increment(code int, status string) {
	e.m.WithLabelValues(strconv.Itoa(code), status).Inc()
}

type labelCounter struct{ m *k8smetrics.CounterVec }

func (c labelCounter) Increment(label string) { c.m.WithLabelValues(label).Inc() }

type caReloads struct{ m *k8smetrics.CounterVec }

func (c caReloads) Increment(result, reason string) { c.m.WithLabelValues(result, reason).Inc() }

type intGauge struct{ m *k8smetrics.Gauge }

func (g intGauge) Observe(v int) { g.m.Set(float64(v)) }

type plainCounter struct{ m *k8smetrics.Counter }

func (c plainCounter) Increment() { c.m.Inc() }
