package proxies

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kproxy.dev/kproxy/bench/cluster"
)

//go:embed kube-proxy.yaml
var kubeProxyManifest string

// Objects returns the API objects that run cfg: deploy/base/kproxy.yaml (given
// as kproxyManifest) with the cluster's values and cfg's mode, or the
// reference kube-proxy's manifest.
func Objects(cfg Config, kproxyManifest string) ([]runtime.Object, error) {
	var manifest string
	var err error
	switch cfg.Proxy {
	case Kproxy:
		manifest, err = kproxyObjects(cfg, kproxyManifest)
	case KubeProxy:
		manifest, err = kubeProxyObjects(cfg)
	default:
		err = fmt.Errorf("unknown proxy %q", cfg.Proxy)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	objs, err := cluster.DecodeManifest(manifest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	if cfg.Legacy {
		if err := addLegacyInit(objs); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Name, err)
		}
	}
	return objs, nil
}

// kproxyObjects sets the mode (and portal kind) in the cluster's rendering
// of deploy/base/kproxy.yaml, as an operator would in its config.conf.
func kproxyObjects(cfg Config, manifest string) (string, error) {
	rendered, err := cluster.RenderManifest(manifest)
	if err != nil || cfg.Mode == "" {
		return rendered, err
	}
	const from = `    mode: ""`
	if n := strings.Count(rendered, from); n != 1 {
		return "", fmt.Errorf("setting the mode: the manifest holds %q %d times, want once", from, n)
	}
	to := "    mode: " + cfg.Mode
	if cfg.Portals != "" {
		to += "\n    userspacePortals: " + cfg.Portals
	}
	return strings.Replace(rendered, from, to, 1), nil
}

func kubeProxyObjects(cfg Config) (string, error) {
	t, err := template.New("kube-proxy.yaml").Option("missingkey=error").Parse(kubeProxyManifest)
	if err != nil {
		return "", fmt.Errorf("parsing kube-proxy's manifest: %w", err)
	}
	var b strings.Builder
	err = t.Execute(&b, map[string]string{
		"Server": cluster.APIServerURL(), "ClusterCIDR": cluster.PodCIDR, "Mode": cfg.Mode, "Image": KubeProxyImage,
	})
	if err != nil {
		return "", fmt.Errorf("rendering kube-proxy's manifest: %w", err)
	}
	return b.String(), nil
}

// legacyInit turns the node into an iptables-legacy node before the proxy
// starts, as an administrator would: the rules the kubelet keeps in
// iptables-nft are copied to iptables-legacy, and iptables-nft's tables
// removed. kproxy then finds the node's rules in the legacy backend and
// writes its own there (Features.BackendReason in its log says so). The
// kubelet recreates its iptables-nft chains when it notices them gone;
// the proxy's choice, made at start, stands.
const legacyInit = `set -e
for p in iptables ip6tables; do "$p-nft-save" | "$p-legacy-restore"; done
for f in ip ip6; do for t in filter nat mangle raw security; do nft delete table "$f" "$t" 2>/dev/null || true; done; done
`

// addLegacyInit adds legacyInit to the proxy's DaemonSet as an init
// container in the proxy's own image (it carries both backends and nft).
func addLegacyInit(objs []runtime.Object) error {
	for _, obj := range objs {
		ds, ok := obj.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		spec := &ds.Spec.Template.Spec
		if len(spec.Containers) == 0 {
			return fmt.Errorf("DaemonSet %s has no container", ds.Name)
		}
		proxy := spec.Containers[0]
		privileged := true
		init := v1.Container{
			Name: "iptables-legacy-node", Image: proxy.Image, ImagePullPolicy: proxy.ImagePullPolicy,
			Command:         []string{"/bin/sh", "-c", legacyInit},
			SecurityContext: &v1.SecurityContext{Privileged: &privileged},
		}
		for _, m := range proxy.VolumeMounts {
			if m.MountPath == "/run/xtables.lock" {
				init.VolumeMounts = append(init.VolumeMounts, m)
			}
		}
		spec.InitContainers = append(spec.InitContainers, init)
		return nil
	}
	return fmt.Errorf("the manifest holds no DaemonSet")
}
