// Package metrics holds kproxy's Prometheus metrics: kube-proxy's sync and
// health metrics under their kube-proxy names, labels and stability
// annotations (declared through k8s.io/component-base/metrics as kube-proxy
// declares them), plus kproxy's own. Everything lives on a private
// KubeRegistry so tests and several instances never collide.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/prometheus/slis"

	"kproxy.dev/kproxy/sync/buildinfo"
	"kproxy.dev/kproxy/sync/ipfamily"
)

const (
	kubeProxySubsystem = "kubeproxy"
	kproxyNamespace    = "kproxy"
	ipFamilyLabel      = "ip_family"
)

// Metrics is the set of sync and health metrics. Other packages register
// their own collectors on Registry.
type Metrics struct {
	registry k8smetrics.KubeRegistry
	// slis is /metrics/slis: kube-proxy registers component-base's health
	// check SLIs there and records none, so it serves only the process
	// start time; so does kproxy.
	slis    k8smetrics.KubeRegistry
	started time.Time
	rest    *restClient
	// featureInfo is kubernetes_feature_enabled; RecordFeatureGates sets it.
	featureInfo *k8smetrics.GaugeVec

	// SyncDuration is how long each call into the mode took.
	SyncDuration FamilyHistogram
	// SyncLastTimestamp is the Unix time of the last successful sync.
	SyncLastTimestamp FamilyGauge
	// LastQueuedTimestamp is the Unix time a sync was last asked for.
	LastQueuedTimestamp FamilyGauge
	// NetworkProgrammingDuration is the time from an EndpointSlice's
	// last-change-trigger-time to the sync that programmed it.
	NetworkProgrammingDuration FamilyHistogram

	ServiceChangesTotal    *k8smetrics.Counter
	ServiceChangesPending  *k8smetrics.Gauge
	EndpointChangesTotal   *k8smetrics.Counter
	EndpointChangesPending *k8smetrics.Gauge

	// HealthzTotal and LivezTotal count responses by HTTP status code.
	HealthzTotal *prometheus.CounterVec
	LivezTotal   *prometheus.CounterVec

	// NoLocalEndpoints is kube-proxy's count of services with a Local
	// traffic policy and no local endpoint, by traffic_policy (internal,
	// external) and ip_family; NoLocalEndpointsObserver sets it.
	NoLocalEndpoints *k8smetrics.GaugeVec

	// SyncFailuresTotal counts mode syncs that returned an error.
	SyncFailuresTotal *k8smetrics.Counter
	// EventToSyncDuration is the time from receiving a source event to the
	// end of the mode sync that applied it.
	EventToSyncDuration *k8smetrics.Histogram
	// ServicePorts and Endpoints describe the last successfully synced snapshot.
	ServicePorts *k8smetrics.Gauge
	Endpoints    *k8smetrics.Gauge
}

// networkProgrammingBuckets are kube-proxy's: 0.25s and 0.5s, every second to
// 59s, every 5s to 115s, then every 30s to 5 minutes.
func networkProgrammingBuckets() []float64 {
	return k8smetrics.MergeBuckets(
		k8smetrics.LinearBuckets(0.25, 0.25, 2),
		k8smetrics.LinearBuckets(1, 1, 59),
		k8smetrics.LinearBuckets(60, 5, 12),
		k8smetrics.LinearBuckets(120, 30, 7),
	)
}

// New returns the metrics registered on a new registry that also carries the
// Go runtime and process collectors, kubernetes_build_info and the
// registry's meta metrics, as kube-proxy's legacy registry does. families
// are the node's IP families, the values of the ip_family label the
// family-wide metrics (a sync covers every family) are reported under; none
// means IPv4.
func New(families ...ipfamily.Family) *Metrics {
	fams := make([]string, 0, 2)
	for _, f := range families {
		fams = append(fams, string(f))
	}
	if len(fams) == 0 {
		fams = []string{string(ipfamily.IPv4)}
	}
	famLabel := []string{ipFamilyLabel}
	m := &Metrics{
		registry: k8smetrics.NewKubeRegistry(),
		slis:     k8smetrics.NewKubeRegistry(),
		started:  time.Now(),
	}
	syncDuration := k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_duration_seconds",
		Help: "SyncProxyRules latency in seconds",
		// 1ms doubling to about 16s, as kube-proxy.
		Buckets: k8smetrics.ExponentialBuckets(0.001, 2, 15), StabilityLevel: k8smetrics.ALPHA,
	}, famLabel)
	lastTimestamp := k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_last_timestamp_seconds",
		Help: "The last time proxy rules were successfully synced", StabilityLevel: k8smetrics.ALPHA,
	}, famLabel)
	lastQueued := k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_last_queued_timestamp_seconds",
		Help: "The last time a sync of proxy rules was queued", StabilityLevel: k8smetrics.ALPHA,
	}, famLabel)
	networkProgramming := k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
		Subsystem: kubeProxySubsystem, Name: "network_programming_duration_seconds",
		Help: "In Cluster Network Programming Latency in seconds", Buckets: networkProgrammingBuckets(),
		StabilityLevel: k8smetrics.ALPHA,
	}, famLabel)
	healthz := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem: kubeProxySubsystem, Name: "proxy_healthz_total",
		Help: "Cumulative proxy healthz HTTP status", StabilityLevel: k8smetrics.ALPHA,
	}, []string{"code"})
	livez := k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem: kubeProxySubsystem, Name: "proxy_livez_total",
		Help: "Cumulative proxy livez HTTP status", StabilityLevel: k8smetrics.ALPHA,
	}, []string{"code"})
	m.ServiceChangesTotal = k8smetrics.NewCounter(&k8smetrics.CounterOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_service_changes_total",
		Help: "Cumulative proxy rules Service changes", StabilityLevel: k8smetrics.ALPHA,
	})
	m.ServiceChangesPending = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_service_changes_pending",
		Help: "Pending proxy rules Service changes", StabilityLevel: k8smetrics.ALPHA,
	})
	m.EndpointChangesTotal = k8smetrics.NewCounter(&k8smetrics.CounterOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_endpoint_changes_total",
		Help: "Cumulative proxy rules Endpoint changes", StabilityLevel: k8smetrics.ALPHA,
	})
	m.EndpointChangesPending = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_endpoint_changes_pending",
		Help: "Pending proxy rules Endpoint changes", StabilityLevel: k8smetrics.ALPHA,
	})
	m.NoLocalEndpoints = k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_no_local_endpoints_total",
		Help: "Number of services with a Local traffic policy and no endpoints", StabilityLevel: k8smetrics.ALPHA,
	}, []string{"traffic_policy", ipFamilyLabel})
	m.SyncFailuresTotal = k8smetrics.NewCounter(&k8smetrics.CounterOpts{
		Namespace: kproxyNamespace, Name: "sync_failures_total",
		Help: "Mode syncs that failed and were scheduled for retry", StabilityLevel: k8smetrics.ALPHA,
	})
	m.EventToSyncDuration = k8smetrics.NewHistogram(&k8smetrics.HistogramOpts{
		Namespace: kproxyNamespace, Name: "event_to_sync_duration_seconds",
		Help: "Time from receiving a Service, EndpointSlice, Node or file event to the end of the mode sync that applied it, in seconds",
		// 1ms doubling to about 9 minutes: covers sub-millisecond local
		// syncs as well as slow periodic ones.
		Buckets: k8smetrics.ExponentialBuckets(0.001, 2, 20), StabilityLevel: k8smetrics.ALPHA,
	})
	m.ServicePorts = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Namespace: kproxyNamespace, Name: "service_ports",
		Help: "Service ports in the last successfully synced snapshot", StabilityLevel: k8smetrics.ALPHA,
	})
	m.Endpoints = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Namespace: kproxyNamespace, Name: "endpoints",
		Help: "Endpoints, summed over service ports, in the last successfully synced snapshot", StabilityLevel: k8smetrics.ALPHA,
	})
	build := newBuildInfo()
	m.featureInfo = newFeatureInfo()

	m.registry.RawMustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)),
	)
	m.registry.RegisterMetaMetrics()
	m.registry.MustRegister(build, m.featureInfo,
		syncDuration, lastTimestamp, lastQueued, networkProgramming, healthz, livez,
		m.ServiceChangesTotal, m.ServiceChangesPending, m.EndpointChangesTotal, m.EndpointChangesPending,
		m.NoLocalEndpoints, m.SyncFailuresTotal, m.EventToSyncDuration, m.ServicePorts, m.Endpoints,
	)
	setBuildInfo(build)
	m.rest = newRestClient()
	m.rest.register(m.registry)
	// Registered, the vectors are real: hand out the Prometheus ones where
	// callers need their type.
	m.HealthzTotal, m.LivezTotal = healthz.CounterVec, livez.CounterVec
	m.SyncDuration = FamilyHistogram{familyVec[k8smetrics.ObserverMetric]{syncDuration, fams}}
	m.NetworkProgrammingDuration = FamilyHistogram{familyVec[k8smetrics.ObserverMetric]{networkProgramming, fams}}
	m.SyncLastTimestamp = FamilyGauge{familyVec[k8smetrics.GaugeMetric]{lastTimestamp, fams}}
	m.LastQueuedTimestamp = FamilyGauge{familyVec[k8smetrics.GaugeMetric]{lastQueued, fams}}

	slis.Register(m.slis)
	return m
}

// InstallClientGo makes client-go report its rest_client_* metrics here.
// client-go keeps one set of metric hooks per process and takes only the
// first it is given: call this once, before creating clients.
func (m *Metrics) InstallClientGo() { m.rest.install() }

// Registry is where other packages register their own collectors.
func (m *Metrics) Registry() prometheus.Registerer { return m.registry.Registerer() }

// Gatherer reads every metric of the registry.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.registry.Gatherer() }

// Handler serves the registry in the Prometheus exposition format, for /metrics.
func (m *Metrics) Handler() http.Handler {
	return k8smetrics.HandlerFor(m.registry, k8smetrics.HandlerOpts{ProcessStartTime: m.started})
}

// SLIHandler serves /metrics/slis.
func (m *Metrics) SLIHandler() http.Handler {
	return k8smetrics.HandlerFor(m.slis, k8smetrics.HandlerOpts{})
}

// familyVec is a vector with kube-proxy's ip_family label that a kproxy
// sync, which covers every family at once, updates for each family.
type familyVec[M any] struct {
	vec interface {
		prometheus.Collector
		WithLabelValues(lvs ...string) M
	}
	families []string
}

// each calls update with the metric of every family.
func (f familyVec[M]) each(update func(M)) {
	for _, family := range f.families {
		update(f.vec.WithLabelValues(family))
	}
}

// Describe implements prometheus.Collector.
func (f familyVec[M]) Describe(ch chan<- *prometheus.Desc) { f.vec.Describe(ch) }

// Collect implements prometheus.Collector.
func (f familyVec[M]) Collect(ch chan<- prometheus.Metric) { f.vec.Collect(ch) }

// FamilyHistogram is a histogram with kube-proxy's ip_family label, observed
// for every family at once.
type FamilyHistogram struct {
	familyVec[k8smetrics.ObserverMetric]
}

// Observe records v for every family.
func (h FamilyHistogram) Observe(v float64) {
	h.each(func(o k8smetrics.ObserverMetric) { o.Observe(v) })
}

// FamilyGauge is a gauge with kube-proxy's ip_family label, set for every
// family at once.
type FamilyGauge struct {
	familyVec[k8smetrics.GaugeMetric]
}

// Set sets v for every family.
func (g FamilyGauge) Set(v float64) {
	g.each(func(m k8smetrics.GaugeMetric) { m.Set(v) })
}

func newBuildInfo() *k8smetrics.GaugeVec {
	return k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Name:           "kubernetes_build_info",
		Help:           "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
		StabilityLevel: k8smetrics.BETA,
	}, []string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"})
}

// setBuildInfo labels kubernetes_build_info with kproxy's build, the same
// version `kproxy --version` prints.
func setBuildInfo(g *k8smetrics.GaugeVec) {
	i := buildinfo.Get()
	g.WithLabelValues(i.Major, i.Minor, i.GitVersion, i.GitCommit, i.GitTreeState, i.BuildDate, i.GoVersion, i.Compiler, i.Platform).Set(1)
}
