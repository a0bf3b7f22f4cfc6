package deploy

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// podMonitorPath is the PodMonitor of deploy/monitoring, from this
// package's directory.
const podMonitorPath = "../../deploy/monitoring/podmonitor.yaml"

// metricsPort is kproxy's metrics port, kube-proxy's: the port of its
// default metricsBindAddress, 127.0.0.1:10249, which operators widen to
// 0.0.0.0:10249.
const metricsPort = "10249"

// podMonitor is the part of the Prometheus operator's monitoring.coreos.com/v1
// PodMonitor the manifest uses, under the CRD's field names. It is decoded
// strictly, so a misspelt or misplaced field fails the test; a field the
// manifest starts using is added here, as the CRD names it.
type podMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		JobLabel          string `json:"jobLabel"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		PodMetricsEndpoints []struct {
			Path        string        `json:"path"`
			Scheme      string        `json:"scheme"`
			Relabelings []relabelling `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// relabelling is one of Prometheus's relabel_configs, as the operator
// spells it.
type relabelling struct {
	Action       string   `json:"action"`
	SourceLabels []string `json:"sourceLabels"`
	Separator    string   `json:"separator"`
	Regex        string   `json:"regex"`
	TargetLabel  string   `json:"targetLabel"`
	Replacement  string   `json:"replacement"`
}

// apply runs r on labels as Prometheus does for action replace (its
// default): the source labels' values joined by the separator, matched
// against the anchored regex, and on a match the replacement, expanded,
// set as the target label. Other actions are refused.
func (r relabelling) apply(labels map[string]string) error {
	if r.Action != "" && r.Action != "replace" {
		return fmt.Errorf("action %q: the test knows only replace", r.Action)
	}
	sep, pattern, replacement := r.Separator, r.Regex, r.Replacement
	if sep == "" {
		sep = ";"
	}
	if pattern == "" {
		pattern = "(.*)"
	}
	if replacement == "" {
		replacement = "$1"
	}
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return fmt.Errorf("regex %q: %w", r.Regex, err)
	}
	var values []string
	for _, l := range r.SourceLabels {
		values = append(values, labels[l])
	}
	value := strings.Join(values, sep)
	m := re.FindStringSubmatchIndex(value)
	if m == nil {
		return nil
	}
	labels[r.TargetLabel] = string(re.ExpandString(nil, replacement, value, m))
	return nil
}

// TestPodMonitorSelectsKproxy checks deploy/monitoring's PodMonitor against
// deploy/base/kproxy.yaml: it selects the DaemonSet's pods, in its namespace,
// and not kube-proxy's; and the targets it makes of them, relabelled as
// Prometheus would, scrape the metrics port at the pod's (the node's)
// address as job="kube-proxy" with the node's name as instance, for an
// IPv4 and an IPv6 node. It fails when either file changes alone.
func TestPodMonitorSelectsKproxy(t *testing.T) {
	data, err := os.ReadFile(podMonitorPath)
	if err != nil {
		t.Fatal(err)
	}
	var pm podMonitor
	if err := yaml.UnmarshalStrict(data, &pm); err != nil {
		t.Fatalf("%s is not a PodMonitor as the test knows it: %v", podMonitorPath, err)
	}
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" {
		t.Errorf("%s is a %s %s, want a monitoring.coreos.com/v1 PodMonitor", podMonitorPath, pm.APIVersion, pm.Kind)
	}

	manifest, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Parse(manifest)
	if err != nil {
		t.Fatal(err)
	}
	ds := only(t, objs, "DaemonSet")
	podLabels, _, err := unstructured.NestedStringMap(ds.Object, "spec", "template", "metadata", "labels")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pm.Spec.NamespaceSelector.MatchNames, []string{ds.GetNamespace()}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("namespaceSelector.matchNames %q, want the DaemonSet's namespace %q", got, want)
	}
	selects := func(labels map[string]string) bool {
		for k, v := range pm.Spec.Selector.MatchLabels {
			if labels[k] != v {
				return false
			}
		}
		return true
	}
	if len(pm.Spec.Selector.MatchLabels) == 0 || !selects(podLabels) {
		t.Errorf("selector %v does not select the DaemonSet's pods, labelled %v", pm.Spec.Selector.MatchLabels, podLabels)
	}
	// kubeadm's kube-proxy pods, still running during a swap.
	if kubeProxyPod := map[string]string{"k8s-app": "kube-proxy"}; selects(kubeProxyPod) {
		t.Errorf("selector %v also selects kube-proxy's pods, labelled %v", pm.Spec.Selector.MatchLabels, kubeProxyPod)
	}

	// The relabelling relies on the pod IP being the node's and on a
	// port-free target, which a pod without container ports gives.
	if host, _, _ := unstructured.NestedBool(ds.Object, "spec", "template", "spec", "hostNetwork"); !host {
		t.Errorf("the DaemonSet's pods are not on the host network: the pod IP is not where kproxy listens")
	}
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		if ports, ok := c.(map[string]any)["ports"]; ok {
			t.Errorf("a container declares ports %v: Prometheus then makes one target per port, which the relabelling does not expect", ports)
		}
	}
	// A metrics address set in the ConfigMap must keep the port.
	cm := only(t, objs, "ConfigMap")
	conf, _, _ := unstructured.NestedString(cm.Object, "data", "config.conf")
	var kpc struct {
		MetricsBindAddress string `json:"metricsBindAddress"`
	}
	if err := yaml.Unmarshal([]byte(conf), &kpc); err != nil {
		t.Fatalf("the ConfigMap's config.conf: %v", err)
	}
	if a := kpc.MetricsBindAddress; a != "" && !strings.HasSuffix(a, ":"+metricsPort) {
		t.Errorf("the ConfigMap sets metricsBindAddress %q, not on port %s, which the PodMonitor scrapes", a, metricsPort)
	}

	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("%d podMetricsEndpoints, want 1", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Path != "/metrics" || ep.Scheme != "http" {
		t.Errorf("scrapes %s://…%s, want http://…/metrics", ep.Scheme, ep.Path)
	}
	for _, node := range []struct{ ip, address string }{
		{"198.19.0.1", "198.19.0.1:" + metricsPort},
		{"fd00:19::1", "[fd00:19::1]:" + metricsPort},
	} {
		// What Prometheus's pod discovery gives a port-free container of
		// the pod, with the job the operator sets from jobLabel before the
		// endpoint's relabelings run.
		labels := map[string]string{
			"__address__":                     node.ip,
			"__meta_kubernetes_pod_ip":        node.ip,
			"__meta_kubernetes_pod_node_name": "node-a",
			"__meta_kubernetes_namespace":     ds.GetNamespace(),
			"job":                             podLabels[pm.Spec.JobLabel],
		}
		for k, v := range podLabels {
			labels["__meta_kubernetes_pod_label_"+regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(k, "_")] = v
		}
		for i, r := range ep.Relabelings {
			if err := r.apply(labels); err != nil {
				t.Fatalf("relabelings[%d]: %v", i, err)
			}
		}
		want := map[string]string{"__address__": node.address, "instance": "node-a", "job": "kube-proxy"}
		got := map[string]string{}
		for k := range want {
			got[k] = labels[k]
		}
		if !maps.Equal(got, want) {
			t.Errorf("a pod on node-a (%s) becomes the target %v, want %v", node.ip, got, want)
		}
	}
}
