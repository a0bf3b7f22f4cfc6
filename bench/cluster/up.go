package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// readyTimeout bounds the wait for the nodes and kproxy's pods.
const readyTimeout = 3 * time.Minute

// Up brings up the cluster cfg describes and returns once every node is
// Ready and kproxy runs on each, printing progress to out. On an error the
// cluster stays as far as it got (its logs in the state directory): Down
// removes it.
func Up(ctx context.Context, cfg Config, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := preflight(cfg); err != nil {
		return err
	}
	c := &cluster{cfg: cfg, paths: paths{dir: cfg.StateDir}, nodes: Nodes(cfg.Nodes)}
	began := time.Now()
	step := func(what string, fn func() error) error {
		t := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("%s: %w (logs in %s; make cluster-down removes what is up)", what, err, c.paths.logDir())
		}
		fmt.Fprintf(out, "cluster: %s (%.1fs)\n", what, time.Since(t).Seconds())
		return nil
	}
	if err := step("state directory and host record", func() error {
		if err := os.MkdirAll(c.paths.logDir(), 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", cfg.StateDir, err)
		}
		return recordHost(cfg.StateDir)
	}); err != nil {
		return err
	}
	var images []image
	var extra map[string]string
	steps := []struct {
		what string
		fn   func() error
	}{
		{"certificates and kubeconfigs", c.writePKI},
		{"cluster images", func() (err error) { images, err = c.buildImages(); return err }},
		{"extra images listed", func() (err error) { extra, err = c.extraArchives(); return err }},
		{"network namespaces", func() error { return buildNetwork(c.nodes) }},
		{"cgroups", func() error { return createCgroup(daemonsCgroup) }},
		{"control plane", func() error { return c.startControlPlane(ctx) }},
	}
	for _, s := range steps {
		if err := step(s.what, s.fn); err != nil {
			return err
		}
	}
	if err := step("nodes: containerd, images, kubelet", func() error { return c.startNodes(ctx, images, extra, out) }); err != nil {
		return err
	}
	client, err := c.adminClient()
	if err != nil {
		return err
	}
	if err := step("kproxy's manifest applied", func() error { return c.deployKproxy(ctx, client) }); err != nil {
		return err
	}
	if err := step("nodes Ready, kproxy running on each", func() error { return waitReady(ctx, client, len(c.nodes)) }); err != nil {
		return err
	}
	if c.cfg.CoreDNS != "" {
		if err := step("cluster DNS (CoreDNS) ready", func() error { return c.deployDNS(ctx, client) }); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nA %d-node cluster is up (%.0fs), with kproxy as its DaemonSet on every node.\n", len(c.nodes), time.Since(began).Seconds())
	fmt.Fprintf(out, "  kubeconfig: %s\n", AdminKubeconfig(cfg.StateDir))
	fmt.Fprintf(out, "  try:        %s --kubeconfig %s get nodes,pods -A -o wide\n", c.tool("kubectl"), AdminKubeconfig(cfg.StateDir))
	fmt.Fprintf(out, "  a node:     nsenter --net=%s (its iptables, its pods' routes)\n", NetnsPath(c.nodes[0].Netns))
	fmt.Fprintf(out, "  logs:       %s\n", c.paths.logDir())
	fmt.Fprintf(out, "  remove:     make cluster-down\n")
	return nil
}

// startNodes starts every node's containerd, imports the images into it and
// starts its kubelet, the nodes side by side.
func (c *cluster) startNodes(ctx context.Context, images []image, extra map[string]string, out io.Writer) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			if err := c.startNode(ctx, n, images, extra); err != nil {
				errs[i] = fmt.Errorf("%s: %w", n.Name, err)
				return
			}
			fmt.Fprintf(out, "cluster:   %s (%.1fs)\n", n.Name, time.Since(t).Seconds())
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *cluster) startNode(ctx context.Context, n Node, images []image, extra map[string]string) error {
	if err := c.startContainerd(ctx, n); err != nil {
		return err
	}
	if err := c.importImage(n, c.cfg.Image, kproxyImage); err != nil {
		return err
	}
	for _, im := range images {
		if err := c.importImage(n, archivePath(c.paths.images(""), im), im.ref); err != nil {
			return err
		}
	}
	for archive, ref := range extra {
		if err := c.importImage(n, archive, ref); err != nil {
			return err
		}
	}
	for _, name := range c.cfg.PauseNames {
		if err := c.tagImage(n, PauseImage, name); err != nil {
			return err
		}
	}
	return c.startKubelet(n)
}

// kproxyImage is the image deploy/base/kproxy.yaml names, as make image builds it.
const kproxyImage = "localhost/kproxy:latest"

// preflight refuses a second cluster and names what is missing.
func preflight(cfg Config) error {
	if _, err := os.Stat(cfg.StateDir); err == nil {
		return fmt.Errorf("%s exists: a cluster is up or was left behind; make cluster-down removes it", cfg.StateDir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking %s: %w", cfg.StateDir, err)
	}
	if names, err := clusterNetns(); err != nil {
		return err
	} else if len(names) > 0 {
		return fmt.Errorf("network namespaces %v are left from a cluster: make cluster-down removes them", names)
	}
	for _, b := range []struct{ path, from string }{
		{cfg.ToolsBin + "/" + etcdBinary, "make tools"},
		{cfg.ToolsBin + "/" + apiserverBinary, "make tools"},
		{cfg.ToolsBin + "/" + controllerManagerBinary, "make cluster-tools"},
		{cfg.ToolsBin + "/" + schedulerBinary, "make cluster-tools"},
		{cfg.ToolsBin + "/" + kubeletBinary, "make cluster-tools"},
		{cfg.Image, "make image"},
		{cfg.Manifest, "the checkout"},
		{cfg.CoreDNS, "make conformance-tools"},
	} {
		if b.path == "" {
			continue
		}
		if _, err := os.Stat(b.path); err != nil {
			return fmt.Errorf("%s is missing (%s builds it): %w", b.path, b.from, err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.APIPort)))
	if err != nil {
		return fmt.Errorf("the API port on the host's loopback is taken (choose another): %w", err)
	}
	return ln.Close()
}

// waitReady waits until n nodes are Ready and kproxy's DaemonSet has a
// ready pod on each.
func waitReady(ctx context.Context, client kubernetes.Interface, n int) error {
	return WaitFor(ctx, readyTimeout, "nodes and kproxy ready", func(ctx context.Context) error {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, node := range nodes.Items {
			for _, cond := range node.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					ready++
				}
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d nodes Ready", ready, n)
		}
		ds, err := client.AppsV1().DaemonSets("kube-system").Get(ctx, "kproxy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.NumberReady != int32(n) {
			return fmt.Errorf("kproxy ready on %d of %d nodes", ds.Status.NumberReady, n)
		}
		return nil
	})
}
