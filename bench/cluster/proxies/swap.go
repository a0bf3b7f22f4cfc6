package proxies

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"kproxy.dev/kproxy/bench/cluster"
)

const (
	nsenterProgram = "nsenter"
	namespace      = "kube-system"
)

// Bounds on the waits of a swap: generous, since the machine may be busy.
const (
	goneTimeout   = 3 * time.Minute
	readyTimeout  = 3 * time.Minute
	silentTimeout = time.Minute
	dialTimeout   = 2 * time.Second
)

// Swapper moves a running cluster from one node proxy configuration to the
// next.
type Swapper struct {
	Client   kubernetes.Interface
	StateDir string
	Nodes    []cluster.Node
	// KproxyManifest is deploy/base/kproxy.yaml's text.
	KproxyManifest string
	// KproxyBinary and KubeProxyBinary run --cleanup on the nodes: the
	// binaries the images carry.
	KproxyBinary, KubeProxyBinary string
	// KproxyArchive (make image) and KubeProxyArchive, the reference
	// kube-proxy's (make kube-proxy-image), are the OCI archives imported
	// into every node before the run's first configuration of that proxy:
	// a cluster left up by an earlier run holds an older kproxy under the
	// same tag. An empty KproxyArchive keeps the nodes' kproxy image.
	KproxyArchive, KubeProxyArchive string
	imported                        map[string]bool
}

// proxyNames name the DaemonSet and ConfigMap of each proxy: what Remove
// deletes (the ServiceAccounts and role bindings stay).
func proxyNames() []string { return []string{Kproxy, KubeProxy} }

// Remove deletes every node proxy's DaemonSet and ConfigMap and waits
// until their pods are gone.
func (s *Swapper) Remove(ctx context.Context) error {
	ds := s.Client.AppsV1().DaemonSets(namespace)
	cms := s.Client.CoreV1().ConfigMaps(namespace)
	foreground := metav1.DeletePropagationForeground
	for _, name := range proxyNames() {
		if err := ds.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting DaemonSet %s: %w", name, err)
		}
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ConfigMap %s: %w", name, err)
		}
	}
	// Both DaemonSets label their pods as kube-proxy's.
	return cluster.WaitFor(ctx, goneTimeout, "the node proxies' pods gone", func(ctx context.Context) error {
		pods, err := s.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
		if err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d node proxy pods left, %s among them", n, pods.Items[0].Name)
		}
		return nil
	})
}

// Cleanup removes what cfg left in every node's kernel with the proxy's
// own --cleanup (and, for a legacy configuration, empties iptables-legacy
// again), then checks that no node reaches the cluster's Services any
// more: the next configuration starts from a node without a proxy.
func (s *Swapper) Cleanup(ctx context.Context, cfg Config) error {
	bin := s.KproxyBinary
	if cfg.Proxy == KubeProxy {
		bin = s.KubeProxyBinary
	}
	cmds := [][]string{{bin, "--cleanup"}}
	if cfg.Legacy {
		for _, p := range []string{"iptables-legacy-restore", "ip6tables-legacy-restore"} {
			cmds = append(cmds, []string{p})
		}
	}
	err := s.eachNode(func(n cluster.Node) error {
		for _, argv := range cmds {
			var stdin []byte
			if strings.HasSuffix(argv[0], "-legacy-restore") {
				// Restoring empty tables flushes them and deletes their chains.
				stdin = []byte("*filter\nCOMMIT\n*nat\nCOMMIT\n*mangle\nCOMMIT\n*raw\nCOMMIT\n")
			}
			if err := inNode(n, stdin, argv...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cleaning up after %s: %w", cfg.Name, err)
	}
	return s.eachNode(func(n cluster.Node) error {
		return cluster.WaitFor(ctx, silentTimeout, n.Name+" reaches no Service", func(ctx context.Context) error {
			for _, addr := range checkedServices() {
				if err := dial(ctx, n, addr); err == nil {
					return fmt.Errorf("%s still answers", addr)
				}
			}
			return nil
		})
	})
}

// importImage imports proxy's archive into every node, once per Swapper.
func (s *Swapper) importImage(proxy string) error {
	archive, ref := s.KproxyArchive, KproxyImage
	if proxy == KubeProxy {
		archive, ref = s.KubeProxyArchive, KubeProxyImage
	}
	if archive == "" || s.imported[proxy] {
		return nil
	}
	if err := s.eachNode(func(n cluster.Node) error { return cluster.ImportImage(s.StateDir, n, archive, ref) }); err != nil {
		return err
	}
	if s.imported == nil {
		s.imported = map[string]bool{}
	}
	s.imported[proxy] = true
	return nil
}

// Install rolls cfg out and waits until its pods are ready on every node
// and every node reaches the cluster's Services through it.
func (s *Swapper) Install(ctx context.Context, cfg Config) error {
	if err := s.importImage(cfg.Proxy); err != nil {
		return err
	}
	objs, err := Objects(cfg, s.KproxyManifest)
	if err != nil {
		return err
	}
	if err := cluster.Apply(ctx, s.Client, objs); err != nil {
		return fmt.Errorf("rolling out %s: %w", cfg.Name, err)
	}
	err = cluster.WaitFor(ctx, readyTimeout, cfg.Name+" ready on every node", func(ctx context.Context) error {
		ds, err := s.Client.AppsV1().DaemonSets(namespace).Get(ctx, cfg.Proxy, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n := int32(len(s.Nodes)); ds.Status.NumberReady != n || ds.Status.UpdatedNumberScheduled != n {
			return fmt.Errorf("ready on %d of %d nodes", ds.Status.NumberReady, n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = s.eachNode(func(n cluster.Node) error {
		return cluster.WaitFor(ctx, readyTimeout, n.Name+" reaches the Services through "+cfg.Name, func(ctx context.Context) error {
			for _, addr := range checkedServices() {
				if err := dial(ctx, n, addr); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return s.eachNode(func(n cluster.Node) error { return showsMode(n, cfg) })
}

// showsMode checks that node n's kernel holds what cfg's mode writes, so
// a configuration is what its name says (the backend kproxy picked, the
// portal kind).
func showsMode(n cluster.Node, cfg Config) error {
	argv, want := cfg.evidence()
	out, err := output(n, argv...)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Name, err)
	}
	if !strings.Contains(out, want) {
		return fmt.Errorf("%s: %s on %s shows no %q: the proxy does not run as configured", cfg.Name, strings.Join(argv, " "), n.Name, want)
	}
	return nil
}

// checkedServices are the Services every cluster has, by address: the API
// server's (an endpoint outside the pod network) and the cluster DNS's
// (endpoints in pods).
func checkedServices() []string {
	return []string{
		net.JoinHostPort(cluster.KubernetesServiceIP, "443"),
		net.JoinHostPort(cluster.ClusterDNSIP, strconv.Itoa(53)),
	}
}

func dial(ctx context.Context, n cluster.Node, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := cluster.DialIn(ctx, cluster.NetnsPath(n.Netns), "tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: connecting to %s: %w", n.Name, addr, err)
	}
	return conn.Close()
}

// eachNode runs fn for every node side by side.
func (s *Swapper) eachNode(fn func(cluster.Node) error) error {
	errs := make([]error, len(s.Nodes))
	var wg sync.WaitGroup
	for i, n := range s.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// inNode runs argv in node n's network namespace (the host's mounts: the
// proxy binaries and /run/xtables.lock are the host's).
func inNode(n cluster.Node, stdin []byte, argv ...string) error {
	cmd := nodeCommand(n, argv...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %s: %w: %s", n.Name, strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func output(n cluster.Node, argv ...string) (string, error) {
	cmd := nodeCommand(n, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %s: %w: %s", n.Name, strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func nodeCommand(n cluster.Node, argv ...string) *exec.Cmd {
	return exec.Command(nsenterProgram, append([]string{"--net=" + cluster.NetnsPath(n.Netns), "--"}, argv...)...)
}
