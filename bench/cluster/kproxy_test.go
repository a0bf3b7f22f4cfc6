package cluster

import (
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
)

// The shipped manifest renders, decodes, and carries the cluster's values.
func TestRenderShippedManifest(t *testing.T) {
	data, err := os.ReadFile("../../deploy/base/kproxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := RenderManifest(string(data))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	var cm *v1.ConfigMap
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.ConfigMap:
			cm = o
		case *appsv1.DaemonSet:
			ds = o
		}
	}
	if cm == nil || ds == nil {
		t.Fatalf("got %d objects without the ConfigMap or the DaemonSet", len(objs))
	}
	for _, tc := range []struct{ key, want string }{
		{"api-server", "https://198.19.0.1:6443"},
		{"config.conf", "clusterCIDR: 198.19.16.0/20"},
		{"config.conf", "maxPerCore: 0"},
	} {
		if !strings.Contains(cm.Data[tc.key], tc.want) {
			t.Errorf("%s lacks %q:\n%s", tc.key, tc.want, cm.Data[tc.key])
		}
	}
}

func TestRenderRefusesAChangedManifest(t *testing.T) {
	for _, tc := range []struct{ name, manifest, err string }{
		{"no placeholder", "clusterCIDR: \"\"\n    mode: \"\"\n", "control-plane endpoint"},
		{"twice", "api-server: https://control-plane.invalid:6443\napi-server: https://control-plane.invalid:6443\n", "2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RenderManifest(tc.manifest)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}
