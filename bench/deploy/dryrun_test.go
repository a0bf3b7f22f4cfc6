package deploy

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kproxy.dev/kproxy/bench/lab"
)

// TestServerSideDryRun applies deploy/base/kproxy.yaml to a real kube-apiserver
// v1.36.3 with server-side apply and dry run (kubectl apply --server-side
// --dry-run=server), and broken copies of it, each of which the API server
// must refuse: so a manifest it would not take cannot pass. A pod of the
// DaemonSet goes through the same dry run, for what only pods are checked
// for (the priority class, for one).
func TestServerSideDryRun(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	manifest, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	api := lab.StartAPIServer(t, lab.WithPrivilegedContainers())
	a, err := newApplier(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, tc := range []struct {
		name     string
		old, new string // replaced once in the manifest; none when old is ""
		wantErr  string // a part of the error; none when ""
	}{
		{name: "as written"},
		{name: "an unknown field", old: "hostNetwork: true", new: "hostNetwrk: true",
			wantErr: `DaemonSet kproxy: failed to create typed patch object (kube-system/kproxy; apps/v1, Kind=DaemonSet): .spec.template.spec.hostNetwrk: field not declared in schema`},
		{name: "a value of the wrong type", old: "privileged: true", new: `privileged: "yes"`,
			wantErr: `.securityContext.privileged: expected boolean`},
		{name: "a selector that misses the pods", old: "    matchLabels:\n      app.kubernetes.io/name: kproxy\n", new: "    matchLabels:\n      app.kubernetes.io/name: kube-proxy\n",
			wantErr: "`selector` does not match template `labels`"},
		{name: "a probe port out of range", old: "port: 10256", new: "port: 102560",
			wantErr: "readinessProbe.httpGet.port: Invalid value: 102560: must be between 1 and 65535"},
		{name: "a role binding without a role", old: "  name: system:node-proxier\n", new: "  name: \"\"\n",
			wantErr: "roleRef.name: Required value"},
		{name: "a priority class that does not exist", old: "priorityClassName: system-node-critical", new: "priorityClassName: system-node-critcal",
			wantErr: `Pod kproxy-dry-run: pods "kproxy-dry-run" is forbidden: no PriorityClass with name system-node-critcal was found`},
		{name: "a ConfigMap key that cannot be a file name", old: "  config.conf: |-", new: "  config/conf: |-",
			wantErr: `data[config/conf]: Invalid value: "config/conf": a valid config key must consist of alphanumeric characters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := string(manifest)
			if tc.old != "" {
				if n := strings.Count(text, tc.old); n != 1 {
					t.Fatalf("%s has %q %d times, want once: update the case", manifestPath, tc.old, n)
				}
				text = strings.Replace(text, tc.old, tc.new, 1)
			}
			objs, err := Parse([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			pod, err := podOf(only(t, objs, "DaemonSet"), "kproxy-dry-run")
			if err != nil {
				t.Fatal(err)
			}
			err = a.apply(ctx, append(objs, pod), true)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("the API server refuses %s: %v", manifestPath, err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("the API server took the manifest with %q for %q", tc.new, tc.old)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("got error %v, want one containing %s", err, tc.wantErr)
			}
		})
	}

	// A dry run stores nothing.
	objs, err := Parse(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if _, err := a.get(ctx, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%s %s after dry runs: got %v, want not found", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// podOf returns a pod of the DaemonSet: its template, named name, in its
// namespace.
func podOf(ds *unstructured.Unstructured, name string) (*unstructured.Unstructured, error) {
	spec, ok, err := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	if err != nil || !ok {
		return nil, fmt.Errorf("DaemonSet %s has no pod template spec (%v)", ds.GetName(), err)
	}
	labels, _, err := unstructured.NestedStringMap(ds.Object, "spec", "template", "metadata", "labels")
	if err != nil {
		return nil, fmt.Errorf("DaemonSet %s: template labels: %w", ds.GetName(), err)
	}
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": spec}}
	pod.SetName(name)
	pod.SetNamespace(ds.GetNamespace())
	pod.SetLabels(labels)
	return pod, nil
}
