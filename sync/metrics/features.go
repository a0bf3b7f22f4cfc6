package metrics

import (
	"k8s.io/component-base/featuregate"
	k8smetrics "k8s.io/component-base/metrics"
)

// FeatureGate is what RecordFeatureGates reads of a component-base feature
// gate.
type FeatureGate interface {
	GetAll() map[featuregate.Feature]featuregate.FeatureSpec
	Enabled(key featuregate.Feature) bool
}

// newFeatureInfo is component-base's kubernetes_feature_enabled
// (metrics/prometheus/feature), which registers itself on the process-wide
// legacy registry: the same declaration, for this registry.
func newFeatureInfo() *k8smetrics.GaugeVec {
	return k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Namespace:      "kubernetes",
		Name:           "feature_enabled",
		Help:           "This metric records the data about the stage and enablement of a k8s feature.",
		StabilityLevel: k8smetrics.BETA,
	}, []string{"name", "stage"})
}

// RecordFeatureGates sets kubernetes_feature_enabled for every gate of
// gates as component-base's AddMetrics does (kube-proxy calls it once, at
// start): 1 or 0 by name and stage, the stage empty for GA gates.
func (m *Metrics) RecordFeatureGates(gates FeatureGate) {
	for name, spec := range gates.GetAll() {
		v := 0.0
		if gates.Enabled(name) {
			v = 1
		}
		m.featureInfo.WithLabelValues(string(name), string(spec.PreRelease)).Set(v)
	}
}
