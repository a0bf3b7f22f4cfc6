package proxies

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kproxy.dev/kproxy/bench/testkit"
)

func TestSelect(t *testing.T) {
	all := All()
	tests := []struct {
		list string
		want string // names, comma-separated; or the error's text
	}{
		{"", names(all)},
		{"all", names(all)},
		// The run keeps All's order whatever order the list gives.
		{"kube-proxy-nftables, kproxy-iptables", "kproxy-iptables,kube-proxy-nftables"},
		{"kproxy-iptables,kproxy-iptables", "kproxy-iptables"},
		{"kproxy-ebpf,kproxy-iptables,kproxy-bogus", "unknown proxy configurations kproxy-bogus,kproxy-ebpf"},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			got, err := Select(all, tt.list)
			var s string
			if err != nil {
				s = err.Error()
			} else {
				s = names(got)
			}
			if !strings.HasPrefix(s, tt.want) {
				t.Errorf("Select(%q) = %q, want %q", tt.list, s, tt.want)
			}
		})
	}
}

func names(cfgs []Config) string {
	var n []string
	for _, c := range cfgs {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

// Each configuration's objects, summarised: the proxy's config file, the
// DaemonSet's image, command and init containers. The golden files show
// what differs between configurations.
func TestObjects(t *testing.T) {
	manifest, err := os.ReadFile("../../../deploy/base/kproxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range All() {
		t.Run(cfg.Name, func(t *testing.T) {
			objs, err := Objects(cfg, string(manifest))
			if err != nil {
				t.Fatal(err)
			}
			testkit.Golden(t, filepath.Join("testdata", cfg.Name+".golden"), summary(t, objs))
		})
	}
}

func summary(t *testing.T, objs []runtime.Object) string {
	var b strings.Builder
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.ConfigMap:
			fmt.Fprintf(&b, "ConfigMap %s config.conf:\n%s\n", o.Name, o.Data["config.conf"])
			// kproxy's manifest holds the endpoint as api-server (passed as
			// --master), kube-proxy's in its kubeconfig.
			const endpoint = "https://198.19.0.1:6443"
			if o.Data["api-server"] != endpoint && !strings.Contains(o.Data["kubeconfig.conf"], "server: "+endpoint) {
				t.Errorf("ConfigMap %s names another API server: api-server %q, kubeconfig:\n%s", o.Name, o.Data["api-server"], o.Data["kubeconfig.conf"])
			}
		case *appsv1.DaemonSet:
			ds = o
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	spec := ds.Spec.Template.Spec
	fmt.Fprintf(&b, "DaemonSet %s: hostNetwork %v\n", ds.Name, spec.HostNetwork)
	for _, c := range spec.InitContainers {
		fmt.Fprintf(&b, "init container %s %s: %s\n", c.Name, c.Image, strings.Join(c.Command, " "))
	}
	for _, c := range spec.Containers {
		fmt.Fprintf(&b, "container %s %s: %s\n", c.Name, c.Image, strings.Join(c.Command, " "))
	}
	return b.String()
}

func TestEvidence(t *testing.T) {
	for _, cfg := range All() {
		if argv, want := cfg.evidence(); want == "" || len(argv) == 0 {
			t.Errorf("%s: no evidence of its mode (%q, %q)", cfg.Name, argv, want)
		}
	}
}
