package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kproxy.dev/kproxy/bench/lab"
)

// manifestPath is kproxy's manifests, from this package's directory.
const manifestPath = "../../deploy/base/kproxy.yaml"

// controlPlaneEndpoint is the placeholder api-server of
// deploy/base/kproxy.yaml; kubeadm is given the same, so the two differ only
// in where they write it.
const controlPlaneEndpoint = "control-plane.invalid:6443"

// intended is a way deploy/base/kproxy.yaml differs from kubeadm's kube-proxy
// add-on on purpose.
type intended struct {
	Difference
	why string
}

// intendedDifferences lists every difference between deploy/base/kproxy.yaml and
// the kube-proxy add-on of kubeadm v1.36.3, with the values on both sides.
func intendedDifferences() []intended {
	const (
		ownName = "kproxy's own name: kubeadm's kube-proxy objects stay in place for the way back, and kubeadm upgrade and join keep finding theirs"
		ownRef  = "refers to kproxy's own object of that name"
	)
	return []intended{
		{Difference{"ServiceAccount metadata.name", `"kproxy"`, `"kube-proxy"`}, ownName},
		{Difference{"ClusterRoleBinding metadata.name", `"kproxy:node-proxier"`, `"kubeadm:node-proxier"`}, ownName},
		{Difference{"ClusterRoleBinding subjects[0].name", `"kproxy"`, `"kube-proxy"`}, ownRef},
		{Difference{"Role", Absent, Present}, "kubeadm's Role lets kubeadm join's bootstrap tokens read the kube-proxy ConfigMap (the pods never read it through the API: the kubelet mounts it); join reads kubeadm's, which stays, never kproxy's"},
		{Difference{"RoleBinding", Absent, Present}, "binds kubeadm's Role (above) to the bootstrap-token group"},
		{Difference{"ConfigMap metadata.name", `"kproxy"`, `"kube-proxy"`}, ownName},
		{Difference{"ConfigMap metadata.labels.app", `"kproxy"`, `"kube-proxy"`}, ownName},
		{Difference{"DaemonSet metadata.name", `"kproxy"`, `"kube-proxy"`}, ownName},
		{Difference{`DaemonSet spec.selector.matchLabels["app.kubernetes.io/name"]`, `"kproxy"`, Absent}, "kproxy's pods carry kube-proxy's k8s-app label (dashboards, alerts, scrape configs, runbooks and upstream's e2e specs select the node proxy by it), so a label of kproxy's own keeps this selector off kube-proxy's pods during a swap"},
		{Difference{`DaemonSet spec.template.metadata.labels["app.kubernetes.io/name"]`, `"kproxy"`, Absent}, "the selector's label above"},
		{Difference{"DaemonSet spec.template.spec.containers[0].name", `"kproxy"`, `"kube-proxy"`}, "the program it runs"},
		{Difference{"DaemonSet spec.template.spec.containers[0].image", `"localhost/kproxy:latest"`, `"registry.k8s.io/kube-proxy:v1.36.3"`}, "kproxy's image, as `make image` names it (loaded on each node, or pushed to a registry and renamed here)"},
		{Difference{"DaemonSet spec.template.spec.containers[0].command",
			`["/usr/local/bin/kproxy","--config=/var/lib/kube-proxy/config.conf","--hostname-override=$(NODE_NAME)","--master=$(API_SERVER)"]`,
			`["/usr/local/bin/kube-proxy","--config=/var/lib/kube-proxy/config.conf","--hostname-override=$(NODE_NAME)"]`},
			"kproxy's binary in its image, with kube-proxy's flags; --master is the ConfigMap's api-server (below)"},
		{Difference{"DaemonSet spec.template.spec.containers[0].resources", `{"requests":{"cpu":"100m","memory":"64Mi"}}`, Absent},
			"requests, so the scheduler counts the node proxy (about 40-60 MiB RSS up to a thousand service ports); no limits, which would throttle or kill the node's Services with it"},
		{Difference{"DaemonSet spec.template.spec.containers[0].env",
			`[{"name":"NODE_NAME","valueFrom":{"fieldRef":{"fieldPath":"spec.nodeName"}}},{"name":"API_SERVER","valueFrom":{"configMapKeyRef":{"key":"api-server","name":"kproxy"}}}]`,
			`[{"name":"NODE_NAME","valueFrom":{"fieldRef":{"fieldPath":"spec.nodeName"}}}]`},
			"the ConfigMap's api-server, for --master"},
		{Difference{"ConfigMap data.api-server", `"https://` + controlPlaneEndpoint + `"`, Absent},
			"the API server endpoint as a value of its own, which a kustomize overlay (deploy/example) sets with one line; kubeadm writes it into kubeconfig.conf"},
		{Difference{`ConfigMap data["kubeconfig.conf"].clusters[0].cluster.server`, Absent, `"https://` + controlPlaneEndpoint + `"`},
			"given as --master from api-server instead, so the endpoint is set in one place"},
		{Difference{"DaemonSet spec.template.spec.containers[0].readinessProbe", `{"httpGet":{"path":"/livez","port":10256}}`, Absent},
			"a pod is ready once kproxy serves its health port and is not stuck (/livez fails when a change has waited too long for a sync), so a rolling update (an upgrade of kproxy) stops at a node where it does not work; /livez rather than /healthz, which also fails on nodes being taken out and would stall the rollout there"},
		{Difference{"DaemonSet spec.template.spec.containers[0].volumeMounts[0].name", `"kproxy"`, `"kube-proxy"`}, ownRef},
		{Difference{"DaemonSet spec.template.spec.serviceAccountName", `"kproxy"`, `"kube-proxy"`}, ownRef},
		{Difference{"DaemonSet spec.template.spec.volumes[0].configMap.name", `"kproxy"`, `"kube-proxy"`}, ownRef},
		{Difference{"DaemonSet spec.template.spec.volumes[0].name", `"kproxy"`, `"kube-proxy"`}, "the volume of kproxy's ConfigMap"},
	}
}

// TestMatchesKubeadm compares deploy/base/kproxy.yaml field by field with the
// kube-proxy add-on kubeadm v1.36.3 prints (`kubeadm init phase addon
// kube-proxy --print-manifest`, offline): every difference must be in
// intendedDifferences with the same values, and every entry there must
// still differ.
func TestMatchesKubeadm(t *testing.T) {
	ours := parseFile(t, manifestPath)
	theirs := kubeadmManifests(t)
	diffs, err := Compare(ours, theirs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]intended{}
	for _, d := range intendedDifferences() {
		if _, dup := want[d.Path]; dup {
			t.Fatalf("intendedDifferences lists %s twice", d.Path)
		}
		want[d.Path] = d
	}
	seen := map[string]bool{}
	for _, d := range diffs {
		seen[d.Path] = true
		w, ok := want[d.Path]
		switch {
		case !ok:
			t.Errorf("unintended difference from kubeadm's kube-proxy add-on (fix it, or list it with a reason): %s", d)
		case w.Difference != d:
			t.Errorf("intended difference changed: %s\n    intendedDifferences has: %s", d, w.Difference)
		}
	}
	for _, w := range intendedDifferences() {
		if !seen[w.Path] {
			t.Errorf("intendedDifferences lists %s, which no longer differs: drop the entry", w.Difference)
		}
	}
	if t.Failed() {
		t.Logf("kubeadm's kube-proxy add-on:\n%s", kubeadmOutput(t))
	}
}

// TestKproxyReadsKubeadmsConfiguration runs kproxy --write-config-to on the
// config.conf of deploy/base/kproxy.yaml and on kubeadm's, whose every field is
// written out, zero values and nulls included: kproxy must take both
// without a warning, to the same effective configuration.
func TestKproxyReadsKubeadmsConfiguration(t *testing.T) {
	bin := lab.KproxyBinary(t)
	dir := t.TempDir()
	var effective []string
	for _, side := range []struct {
		name string
		objs []*unstructured.Unstructured
	}{
		{"ours", parseFile(t, manifestPath)},
		{"kubeadm's", kubeadmManifests(t)},
	} {
		config := filepath.Join(dir, side.name+".conf")
		if err := os.WriteFile(config, []byte(configMapData(t, side.objs, ConfigKey)), 0o600); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, side.name+".effective.yaml")
		log, err := exec.Command(bin, "--config="+config, "--hostname-override=node", "--write-config-to="+out).CombinedOutput()
		if err != nil {
			t.Fatalf("kproxy --config with %s config.conf: %v\n%s", side.name, err, log)
		}
		if strings.Contains(strings.ToLower(string(log)), "warning") {
			t.Errorf("kproxy --config with %s config.conf warned:\n%s", side.name, log)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		effective = append(effective, string(data))
	}
	if effective[0] != effective[1] {
		t.Errorf("kproxy's effective configuration from our config.conf:\n%s\ndiffers from kubeadm's:\n%s", effective[0], effective[1])
	}
}

// kubeadmOutput runs kubeadm for the kube-proxy add-on's manifests. It
// needs no cluster, registry, network or root: --print-manifest only
// renders them, and an explicit version keeps kubeadm from looking the
// latest one up.
func kubeadmOutput(t *testing.T) []byte {
	t.Helper()
	bin := filepath.Join(lab.ToolsBinDir(t), "kubeadm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubeadm not found: run `make tools` (or `make test`) to build it: %v", err)
	}
	cmd := exec.Command(bin, "init", "phase", "addon", "kube-proxy", "--print-manifest",
		"--kubernetes-version=v1.36.3", "--control-plane-endpoint="+controlPlaneEndpoint,
		// Else kubeadm takes the address of the host's default route, and
		// fails on a host without one; an IPv4 address gives bindAddress
		// 0.0.0.0.
		"--apiserver-advertise-address=198.19.0.1",
		// Never a real cluster's credentials, should the machine have one.
		"--kubeconfig="+filepath.Join(t.TempDir(), "absent.conf"))
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s: %v\n%s", cmd, err, stderr)
	}
	return out
}

func kubeadmManifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Parse(kubeadmOutput(t))
	if err != nil {
		t.Fatalf("kubeadm's kube-proxy add-on: %v", err)
	}
	return objs
}

func parseFile(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return objs
}

// configMapData returns the ConfigMap's value for key, failing the test
// when there is no single ConfigMap or it lacks the key.
func configMapData(t *testing.T, objs []*unstructured.Unstructured, key string) string {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one ConfigMap, have %d", len(found))
	}
	v, ok, err := unstructured.NestedString(found[0].Object, "data", key)
	if err != nil || !ok {
		t.Fatalf("ConfigMap %s has no data[%q] string (%v)", found[0].GetName(), key, err)
	}
	return v
}
