package cluster_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"kproxy.dev/kproxy/bench/cluster"
)

// overlayValues are what an operator sets in a copy of deploy/example,
// and what this machine's nodes need besides.
type overlayValues struct {
	// image is the image by digest, as make image prints it.
	image string
	// apiServer is the control-plane endpoint.
	apiServer string
	// configConf is the whole config.conf: the lab's, with the mode.
	configConf string
}

// writeExampleOverlay copies deploy/example's kustomization into a
// directory of its own with the operator's two values set, the unprivileged
// component switched on (as its comment says to), and one more patch, the
// lab's config.conf. Each edit must apply exactly once, so a changed
// example fails here rather than deploying its placeholders.
func writeExampleOverlay(t *testing.T, root string, v overlayValues) string {
	t.Helper()
	example, err := os.ReadFile(filepath.Join(root, "deploy", "example", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// kustomize takes relative paths only.
	rel := func(name string) string {
		r, err := filepath.Rel(dir, filepath.Join(root, "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	name, digest, ok := strings.Cut(v.image, "@")
	if !ok {
		t.Fatalf("image %q is not named by digest", v.image)
	}
	text := string(example)
	for _, e := range []struct{ from, to string }{
		{"- ../base\n", "- " + rel("base") + "\n"},
		{"  newName: registry.example/kproxy\n", "  newName: " + name + "\n"},
		{"  digest: sha256:" + strings.Repeat("0", 64) + "\n", "  digest: " + digest + "\n"},
		{"  - api-server=https://control-plane.example:6443\n", "  - api-server=" + v.apiServer + "\n"},
		{"# components:\n# - ../unprivileged\n", "components:\n- " + rel("unprivileged") + "\n"},
	} {
		if n := strings.Count(text, e.from); n != 1 {
			t.Fatalf("deploy/example/kustomization.yaml holds %q %d times, want once", e.from, n)
		}
		text = strings.Replace(text, e.from, e.to, 1)
	}
	patch, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]string{"name": "kproxy", "namespace": "kube-system"},
		"data":     map[string]string{"config.conf": v.configConf},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lab-config.yaml"), patch, 0o644); err != nil {
		t.Fatal(err)
	}
	text += "# The lab's config.conf: the mode under test, the pod network, conntrack left to the host.\npatches:\n- path: lab-config.yaml\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// labConfigConf is the config.conf the cluster runs with (the shipped one
// with the lab's values), in the given mode.
func labConfigConf(t *testing.T, manifestPath, mode string) string {
	t.Helper()
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := cluster.RenderManifest(string(data))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := cluster.DecodeManifest(rendered)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if cm, ok := o.(*v1.ConfigMap); ok {
			conf := cm.Data["config.conf"]
			if n := strings.Count(conf, "\nmode: \"\"\n"); n != 1 {
				t.Fatalf("config.conf holds mode: \"\" %d times, want once:\n%s", n, conf)
			}
			return strings.Replace(conf, "\nmode: \"\"\n", "\nmode: "+mode+"\n", 1)
		}
	}
	t.Fatalf("%s has no ConfigMap", manifestPath)
	return ""
}

// kubectl runs the cluster's kubectl as admin, failing the test on an
// error.
func kubectl(ctx context.Context, t *testing.T, tools, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(tools, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// checkUnprivilegedPods checks that every kproxy pod runs image, its init
// container ran kproxy --init-only privileged and succeeded, and kproxy
// itself runs with deploy/unprivileged's capabilities only and has not
// restarted.
func checkUnprivilegedPods(ctx context.Context, t *testing.T, client kubernetes.Interface, image string, nodes int) {
	t.Helper()
	// deploy/unprivileged's capabilities: all dropped, these added.
	adds, drops := []v1.Capability{"NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE", "BPF"}, []v1.Capability{"ALL"}
	pods, err := client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kproxy"})
	if err != nil {
		t.Fatal(err)
	}
	var running []v1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	if len(running) != nodes {
		t.Fatalf("%d kproxy pods, want one per node (%d)", len(running), nodes)
	}
	for _, p := range running {
		spec := p.Spec
		if len(spec.InitContainers) != 1 || !slices.Contains(spec.InitContainers[0].Command, "--init-only") ||
			spec.InitContainers[0].SecurityContext == nil || !ptr.Deref(spec.InitContainers[0].SecurityContext.Privileged, false) {
			t.Errorf("pod %s: want one privileged init container running --init-only, have %+v", p.Name, spec.InitContainers)
		}
		c := spec.Containers[0]
		sc := c.SecurityContext
		switch {
		case c.Image != image:
			t.Errorf("pod %s runs %s, want %s", p.Name, c.Image, image)
		case sc == nil || ptr.Deref(sc.Privileged, false) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			!ptr.Deref(sc.ReadOnlyRootFilesystem, false) || sc.Capabilities == nil:
			t.Errorf("pod %s: kproxy's security context %+v, want unprivileged with a read-only root", p.Name, sc)
		case !slices.Equal(sc.Capabilities.Add, adds) || !slices.Equal(sc.Capabilities.Drop, drops):
			t.Errorf("pod %s: capabilities %+v, want %v added to nothing (drop %v)", p.Name, sc.Capabilities, adds, drops)
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
				t.Errorf("pod %s: init container %s: %+v, want exited 0", p.Name, s.Name, s.State)
			}
		}
		for _, s := range p.Status.ContainerStatuses {
			if !s.Ready || s.RestartCount != 0 {
				t.Errorf("pod %s: container %s ready=%v after %d restarts, want ready at once", p.Name, s.Name, s.Ready, s.RestartCount)
			}
		}
	}
}

// proxyModeOn asks the kproxy of node which mode it runs (/proxyMode on its
// metrics address, loopback in the node's network namespace).
func proxyModeOn(ctx context.Context, node cluster.Node) (string, error) {
	return getFromNode(ctx, nodeHTTPClient(node), "http://127.0.0.1:10249/proxyMode")
}
