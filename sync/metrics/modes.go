package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// IPTablesRestore are kube-proxy's metrics of the iptables rules a mode
// writes, which its iptables and IPVS modes both export under one name,
// each with kube-proxy's ip_family label. A mode takes one view per family
// with For.
type IPTablesRestore struct {
	failures *k8smetrics.CounterVec
	rules    *k8smetrics.GaugeVec
	last     *k8smetrics.GaugeVec
}

// NewIPTablesRestore declares the metrics and registers them on reg (nil:
// nowhere). withLast adds kubeproxy_sync_proxy_rules_iptables_last, which
// needs the mode to report its restores (Restored, SyncSucceeded).
func NewIPTablesRestore(reg prometheus.Registerer, withLast bool) (*IPTablesRestore, error) {
	m := &IPTablesRestore{
		failures: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_iptables_restore_failures_total",
			Help: "Cumulative proxy iptables restore failures", StabilityLevel: k8smetrics.ALPHA,
		}, []string{ipFamilyLabel}),
		rules: k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
			Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_iptables_total",
			Help: "Total number of iptables rules owned by kube-proxy", StabilityLevel: k8smetrics.ALPHA,
		}, []string{"table", ipFamilyLabel}),
		last: k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
			Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_iptables_last",
			Help: "Number of iptables rules written by kube-proxy in last sync", StabilityLevel: k8smetrics.ALPHA,
		}, []string{"table", ipFamilyLabel}),
	}
	cs := []k8smetrics.Registerable{m.failures, m.rules}
	if withLast {
		cs = append(cs, m.last)
	} else {
		Create(m.last)
	}
	if err := Register(reg, cs...); err != nil {
		return nil, err
	}
	return m, nil
}

// For is the view of one family.
func (m *IPTablesRestore) For(fam ipfamily.Family) *IPTablesRestoreFamily {
	return &IPTablesRestoreFamily{
		Failures: m.failures.CounterVec.WithLabelValues(string(fam)),
		Rules:    m.rules.GaugeVec,
		last:     m.last, fam: string(fam),
		written: map[string]int{},
	}
}

// IPTablesRestoreFamily are one family's iptables restore metrics.
type IPTablesRestoreFamily struct {
	// Failures counts iptables-restore runs that failed.
	Failures prometheus.Counter
	// Rules is the number of rules the mode owns, by table and ip_family.
	Rules *prometheus.GaugeVec

	last *k8smetrics.GaugeVec
	fam  string

	mu      sync.Mutex
	written map[string]int // rules restored since SyncStarted, by table
}

// SyncStarted starts counting the rules the sync restores.
func (f *IPTablesRestoreFamily) SyncStarted() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.written)
}

// Restored counts the rules ("-A" lines) of one restore payload, by table.
// The jumps from the built-in chains ("-I") are left out: kube-proxy adds
// those with iptables -I, outside the restore it counts.
func (f *IPTablesRestoreFamily) Restored(payload []byte) {
	counts := map[string]int{}
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(payload))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "):
			counts[table]++
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, n := range counts {
		f.written[t] += n
	}
}

// SyncSucceeded publishes kubeproxy_sync_proxy_rules_iptables_last: the
// rules the sync wrote to each of tables.
func (f *IPTablesRestoreFamily) SyncSucceeded(tables ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range tables {
		f.last.WithLabelValues(t, f.fam).Set(float64(f.written[t]))
	}
}

// Create makes component-base metrics usable without a registry (their
// methods do nothing until created).
func Create(ms ...k8smetrics.Registerable) {
	for _, m := range ms {
		m.Create(nil)
	}
}

// Register creates each component-base metric and registers it on reg; a
// nil reg registers nowhere (tests that do not read metrics). Modes get a
// prometheus.Registerer (contract.Deps), which is the KubeRegistry's own.
func Register(reg prometheus.Registerer, ms ...k8smetrics.Registerable) error {
	Create(ms...)
	if reg == nil {
		return nil
	}
	for _, m := range ms {
		if err := reg.Register(m); err != nil {
			return fmt.Errorf("registering metric %s: %w", m.FQName(), err)
		}
	}
	return nil
}

// RuleSync are the metrics the rule-writing modes (iptables, nftables)
// share, each with kube-proxy's ip_family label: kube-proxy's full and
// partial sync durations, and kproxy's count of service ports the mode's
// rule model rejected (kproxy_<mode>_service_port_errors_total).
type RuleSync struct {
	FullDuration    *k8smetrics.HistogramVec
	PartialDuration *k8smetrics.HistogramVec
	PortErrors      *k8smetrics.CounterVec
}

// NewRuleSync declares mode's RuleSync metrics and registers them on reg
// (nil: nowhere).
func NewRuleSync(reg prometheus.Registerer, mode string) (*RuleSync, error) {
	// kube-proxy's buckets: 1 ms doubling to about 16 s.
	buckets := k8smetrics.ExponentialBuckets(0.001, 2, 15)
	fam := []string{"ip_family"}
	m := &RuleSync{
		FullDuration: k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_full_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for full resyncs", Buckets: buckets, StabilityLevel: k8smetrics.ALPHA,
		}, fam),
		PartialDuration: k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_partial_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for partial resyncs", Buckets: buckets, StabilityLevel: k8smetrics.ALPHA,
		}, fam),
		PortErrors: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Namespace: "kproxy", Name: mode + "_service_port_errors_total",
			Help:           "Service ports the " + mode + " rule model rejected (they keep their previous rules)",
			StabilityLevel: k8smetrics.ALPHA,
		}, fam),
	}
	if err := Register(reg, m.FullDuration, m.PartialDuration, m.PortErrors); err != nil {
		return nil, err
	}
	return m, nil
}
