package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/component-base/featuregate"
)

// TestRecordFeatureGates: one sample per gate, by name and stage, 1 when
// on; GA gates have an empty stage, as in component-base (whose gates
// always hold AllAlpha and AllBeta).
func TestRecordFeatureGates(t *testing.T) {
	tests := []struct {
		name string
		set  map[string]bool
		want string
	}{
		{
			name: "defaults",
			want: `kubernetes_feature_enabled{name="AllAlpha",stage="ALPHA"} 0
kubernetes_feature_enabled{name="AllBeta",stage="BETA"} 0
kubernetes_feature_enabled{name="Alpha",stage="ALPHA"} 0
kubernetes_feature_enabled{name="GA",stage=""} 1
kubernetes_feature_enabled{name="OldBeta",stage="DEPRECATED"} 0
kubernetes_feature_enabled{name="TheBeta",stage="BETA"} 1
`,
		},
		{
			name: "set",
			set:  map[string]bool{"Alpha": true, "TheBeta": false},
			want: `kubernetes_feature_enabled{name="AllAlpha",stage="ALPHA"} 0
kubernetes_feature_enabled{name="AllBeta",stage="BETA"} 0
kubernetes_feature_enabled{name="Alpha",stage="ALPHA"} 1
kubernetes_feature_enabled{name="GA",stage=""} 1
kubernetes_feature_enabled{name="OldBeta",stage="DEPRECATED"} 0
kubernetes_feature_enabled{name="TheBeta",stage="BETA"} 0
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fg := featuregate.NewFeatureGate()
			if err := fg.Add(map[featuregate.Feature]featuregate.FeatureSpec{
				"Alpha":   {Default: false, PreRelease: featuregate.Alpha},
				"TheBeta": {Default: true, PreRelease: featuregate.Beta},
				"GA":      {Default: true, LockToDefault: true, PreRelease: featuregate.GA},
				"OldBeta": {Default: false, PreRelease: featuregate.Deprecated},
			}); err != nil {
				t.Fatal(err)
			}
			if err := fg.SetFromMap(tt.set); err != nil {
				t.Fatal(err)
			}
			m := New()
			m.RecordFeatureGates(fg)
			want := `# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
` + tt.want
			if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "kubernetes_feature_enabled"); err != nil {
				t.Error(err)
			}
		})
	}
}
