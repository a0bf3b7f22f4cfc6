package options

import (
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/component-base/featuregate"
)

// newKubeProxyFeatureGate returns a feature gate holding kube-proxy v1.36's
// gates, set from gates as kube-proxy sets its own (SetFromMap): an unknown
// gate, or a locked one set to another value than its own, is an error
// worded as kube-proxy words it; setting a GA or deprecated gate is a
// warning in the log.
func newKubeProxyFeatureGate(gates map[string]bool) (featuregate.MutableFeatureGate, error) {
	fg := featuregate.NewFeatureGate()
	if err := fg.Add(kubeProxyFeatureGates()); err != nil {
		return nil, err
	}
	return fg, fg.SetFromMap(gates)
}

// FeatureGate returns kube-proxy's feature gate set as c says, for what
// reads it whole (kubernetes_feature_enabled). Complete has already
// validated the settings and logged their warnings: this logs none.
func (c *Config) FeatureGate() (featuregate.MutableFeatureGate, error) {
	fg := featuregate.NewFeatureGate()
	if err := fg.Add(kubeProxyFeatureGates()); err != nil {
		return nil, fmt.Errorf("kube-proxy's feature gates: %w", err)
	}
	if err := fg.SetFromMapWithLogger(logr.Discard(), c.FeatureGates); err != nil {
		return nil, fmt.Errorf("feature gates: %w", err)
	}
	return fg, nil
}

// FeatureEnabled says whether kube-proxy's feature gate name is on: as set
// by --feature-gates or featureGates, else its default. A gate kube-proxy
// does not know is off (Complete refuses to set one).
func (c *Config) FeatureEnabled(name string) bool {
	if on, set := c.FeatureGates[name]; set {
		return on
	}
	return kubeProxyFeatureGates()[featuregate.Feature(name)].Default
}

// knownFeatures lists the gates as kube-proxy's --help does (GA and
// deprecated ones hidden).
func knownFeatures() []string {
	fg, err := newKubeProxyFeatureGate(nil)
	if err != nil {
		return nil
	}
	return fg.KnownFeatures()
}
