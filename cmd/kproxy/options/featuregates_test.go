package options

import (
	"strings"
	"testing"
)

// TestFeatureGates: gates are checked as kube-proxy v1.36 checks them, and
// FeatureEnabled gives a set gate's value or kube-proxy's default.
func TestFeatureGates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gates map[string]bool
		err   string
		on    map[string]bool
	}{
		{name: "none set: defaults", on: map[string]bool{"AllowServiceExternalIPs": true, "LoggingAlphaOptions": false, "Bogus": false}},
		{name: "GA gate off", gates: map[string]bool{"AllowServiceExternalIPs": false}, on: map[string]bool{"AllowServiceExternalIPs": false}},
		{name: "alpha gate on", gates: map[string]bool{"LoggingAlphaOptions": true}, on: map[string]bool{"LoggingAlphaOptions": true}},
		{name: "unknown", gates: map[string]bool{"Bogus": true}, err: "unrecognized feature gate: Bogus"},
		{name: "locked to its value", gates: map[string]bool{"NFTablesProxyMode": true}, on: map[string]bool{"NFTablesProxyMode": true}},
		{name: "locked to another value", gates: map[string]bool{"NFTablesProxyMode": false},
			err: "cannot set feature gate NFTablesProxyMode to false, feature is locked to true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newKubeProxyFeatureGate(tc.gates)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error = %v, want %q", err, tc.err)
			}
			c := &Config{FeatureGates: tc.gates}
			for name, want := range tc.on {
				if got := c.FeatureEnabled(name); got != want {
					t.Errorf("FeatureEnabled(%s) = %v, want %v", name, got, want)
				}
			}
		})
	}
}
