package cluster_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/cluster"
	"kproxy.dev/kproxy/bench/conformance"
	"kproxy.dev/kproxy/bench/lab"
)

// Environment of TestClusterDaemonSetAndConformance, which make test sets.
const (
	clusterTestEnv       = "KPROXY_CLUSTER_TEST"
	imageEnv             = "KPROXY_IMAGE"
	conformanceImagesEnv = "KPROXY_CONFORMANCE_IMAGES"
)

// TestClusterDaemonSetAndConformance is make test's share of make cluster
// and make conformance: it brings up a two-node cluster with kproxy as its
// DaemonSet (its image, imported into each node's containerd, started by
// the kubelets through deploy/base/kproxy.yaml, in the iptables mode it
// picks on this kernel), checks Service traffic from a pod and from another
// node (TestSmoke's check), runs the 15 Services conformance specs, applies
// deploy/example with its two values set and deploy/unprivileged switched
// on in each mode this kernel runs, checking the pods and the traffic
// again, and takes the cluster down again. Only with KPROXY_CLUSTER_TEST=1:
// no other cluster may be up on the machine.
func TestClusterDaemonSetAndConformance(t *testing.T) {
	if os.Getenv(clusterTestEnv) == "" {
		t.Skip(clusterTestEnv + " is not set: make test sets it")
	}
	image, images := os.Getenv(imageEnv), os.Getenv(conformanceImagesEnv)
	if image == "" || images == "" {
		t.Fatalf("%s (make image's archive) and %s (make conformance-images' directory) must be set", imageEnv, conformanceImagesEnv)
	}
	tools := lab.ToolsBinDir(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	kcluster := filepath.Join(t.TempDir(), "kcluster")
	build := exec.Command("go", "build", "-o", kcluster, "./bench/cluster/cmd/kcluster")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kcluster: %v\n%s", err, out)
	}
	dir := filepath.Join(os.TempDir(), "kproxy-cluster-test")
	cfg := cluster.Config{Nodes: 2, StateDir: dir, ToolsBin: tools, Image: image, Manifest: filepath.Join(root, "deploy", "base", "kproxy.yaml"),
		RepoRoot: root, APIPort: cluster.DefaultAPIPort, Self: kcluster, Images: images, CoreDNS: filepath.Join(tools, "coredns")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	out := testWriter{t}
	began := time.Now()
	t.Cleanup(func() {
		if err := cluster.Down(dir, out); err != nil {
			t.Errorf("taking the cluster down: %v", err)
		}
	})
	if err := cluster.Up(ctx, cfg, out); err != nil {
		t.Fatalf("bringing the cluster up: %v", err)
	}
	t.Logf("cluster up in %.0fs", time.Since(began).Seconds())
	client, err := cluster.AdminClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("DaemonSet path: Service traffic from a pod and from another node", func(t *testing.T) {
		checkSmoke(t, client)
	})
	t.Run("Services conformance specs", func(t *testing.T) {
		// Kept after the test: the JUnit report and e2e.test's output.
		reports := filepath.Join(os.TempDir(), "kproxy-cluster-test-conformance")
		r := conformance.Run{ToolsBin: tools, Kubeconfig: cluster.AdminKubeconfig(dir), ReportDir: reports,
			Focus: conformance.ServicesFocus, Skip: conformance.DefaultSkip, Timeout: 20 * time.Minute, Nodes: cfg.Nodes}
		began := time.Now()
		t.Logf("running the specs; e2e.test's output in %s", filepath.Join(reports, "e2e.log"))
		if err := r.Execute(ctx, io.Discard); err != nil {
			t.Fatal(err)
		}
		specs, err := conformance.ReadJUnitFile(r.JUnitPath())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d specs in %.0fs\n%s", len(specs), time.Since(began).Seconds(), conformance.Markdown("Services conformance specs", specs))
		const want = 15
		if len(specs) != want {
			t.Errorf("the run reached %d specs, want the %d Services conformance specs", len(specs), want)
		}
		for _, s := range specs {
			if s.Result != conformance.Passed {
				t.Errorf("%s: %s: %s", s.Name, s.Result, s.Message)
			}
		}
	})
	t.Run("the example overlay, unprivileged, in each mode", func(t *testing.T) {
		imageRef, err := cluster.ArchiveDigestRef(image)
		if err != nil {
			t.Fatal(err)
		}
		kubeconfig := cluster.AdminKubeconfig(dir)
		target := setUpSmoke(ctx, t, client)
		// The IPVS mode needs a kernel with IPVS, which this host lacks:
		// the guest kernel's end-to-end cases run it.
		for _, mode := range []string{"iptables", "nftables", "userspace"} {
			t.Run(mode, func(t *testing.T) {
				overlay := writeExampleOverlay(t, root, overlayValues{image: imageRef, apiServer: cluster.APIServerURL(),
					configConf: labConfigConf(t, cfg.Manifest, mode)})
				kubectl(ctx, t, tools, kubeconfig, "apply", "-k", overlay)
				// A changed ConfigMap alone restarts no pod.
				kubectl(ctx, t, tools, kubeconfig, "-n", "kube-system", "rollout", "restart", "daemonset/kproxy")
				kubectl(ctx, t, tools, kubeconfig, "-n", "kube-system", "rollout", "status", "daemonset/kproxy", "--timeout=5m")
				checkUnprivilegedPods(ctx, t, client, imageRef, cfg.Nodes)
				for i := 1; i <= cfg.Nodes; i++ {
					node := cluster.NodeAt(i)
					if got, err := proxyModeOn(ctx, node); err != nil || got != mode {
						t.Errorf("%s's kproxy runs mode %q (%v), want %s", node.Name, got, err, mode)
					}
				}
				askSmoke(ctx, t, client, target)
			})
		}
	})
}

// testWriter sends progress to the test's log, a line a call.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
