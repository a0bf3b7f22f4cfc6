package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"text/template"
	"time"
)

const (
	containerdProgram = "containerd"
	// cniBinDir is where Debian's containernetworking-plugins installs.
	cniBinDir = "/usr/lib/cni"
)

// containerdConfigText is one node's containerd: its own root, state, sockets
// and runc root, so nodes share nothing but the kernel.
const containerdConfigText = `version = 2
root = "{{.Dir}}/root"
state = "{{.Dir}}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{{.Socket}}"

[ttrpc]
  address = "{{.Socket}}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.PauseImage}}"
  # Root here lacks CAP_SYS_RESOURCE: without this, runc fails to lower a
  # container's oom_score_adj and every sandbox fails to start.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  # No AppArmor profile loaded into the host's kernel.
  disable_apparmor = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{{.Dir}}/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBinDir}}"
    conf_dir = "{{.CNIConfDir}}"
    max_conf_num = 1
`

// kubeletConfigText is one node's KubeletConfiguration.
const kubeletConfigText = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{.NodeIP}}
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {{.CA}}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://{{.Socket}}
# containerd 1.6 cannot tell the kubelet its cgroup driver.
cgroupDriver: cgroupfs
# Each node's pods under their own cgroup, on one machine.
cgroupRoot: /{{.Cgroup}}
# This machine runs cgroup v1.
failCgroupV1: false
failSwapOn: false
# Lowering its own score needs CAP_SYS_RESOURCE, which root lacks here.
oomScoreAdj: 0
podLogsDir: {{.Dir}}/pod-logs
clusterDomain: {{.ClusterDomain}}
{{- if .ClusterDNS}}
clusterDNS: [{{.ClusterDNS}}]
{{- end}}
maxPods: 50
serializeImagePulls: false
# A shared disk: the other nodes' images and logs are not this node's
# pressure.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`

// cniConfig is the node's pod network: a routed veth per pod (ptp) with an
// address from the node's range, and hostPort support (portmap).
func cniConfig(n Node, ipamDir string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "kproxy-cluster",
		"plugins": []any{
			map[string]any{
				"type":   "ptp",
				"ipMasq": false,
				"mtu":    1500,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": ipamDir,
					"ranges": []any{[]any{map[string]any{
						"subnet":  n.PodCIDR.String(),
						"gateway": n.Gateway.String(),
					}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

func writeTemplate(path string, t *template.Template, data any) error {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return fmt.Errorf("rendering %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// startContainerd writes the node's containerd and CNI configs, starts
// containerd (in the node's namespace, with the node's hostname, which
// hostNetwork pods see) and waits for it.
func (c *cluster) startContainerd(ctx context.Context, n Node) error {
	dir := c.paths.node(n, "containerd")
	cniDir := c.paths.node(n, "cni", "net.d")
	for _, d := range []string{dir, cniDir, c.paths.node(n, "cni", "ipam")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	conf, err := cniConfig(n, c.paths.node(n, "cni", "ipam"))
	if err != nil {
		return fmt.Errorf("CNI config: %w", err)
	}
	if err := os.WriteFile(c.paths.node(n, "cni", "net.d", "10-kproxy-cluster.conflist"), conf, 0o644); err != nil {
		return fmt.Errorf("writing the CNI config: %w", err)
	}
	config := c.paths.node(n, "containerd", "config.toml")
	if err := writeTemplate(config, template.Must(template.New("containerd").Parse(containerdConfigText)), map[string]string{
		"Dir": dir, "Socket": n.containerdSocket(c.paths), "PauseImage": PauseImage,
		"CNIBinDir": cniBinDir, "CNIConfDir": cniDir,
	}); err != nil {
		return err
	}
	bin, err := exec.LookPath(containerdProgram)
	if err != nil {
		return fmt.Errorf("containerd is not installed (.ci/install-deps): %w", err)
	}
	if err := c.start(daemon{name: n.Name + "-containerd", netns: n.Netns, hostname: n.Name, cgroup: daemonsCgroup,
		argv: []string{bin, "--config", config}}); err != nil {
		return err
	}
	return WaitFor(ctx, time.Minute, n.Name+"'s containerd answering", func(context.Context) error {
		_, err := run("", nil, ctrProgram, "--address", n.containerdSocket(c.paths), "version")
		return err
	})
}

// startKubelet writes the node's kubelet config and kubeconfig and starts
// the kubelet, which registers the node.
func (c *cluster) startKubelet(n Node) error {
	dir := c.paths.node(n, "kubelet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := createCgroup(n.cgroup()); err != nil {
		return err
	}
	config := c.paths.node(n, "kubelet-config.yaml")
	if err := writeTemplate(config, template.Must(template.New("kubelet").Parse(kubeletConfigText)), map[string]string{
		"NodeIP": n.IP.String(), "CA": c.paths.pki("ca.crt"), "Socket": n.containerdSocket(c.paths),
		"Cgroup": n.cgroup(), "Dir": c.paths.node(n), "ClusterDomain": ClusterDomain, "ClusterDNS": c.clusterDNS(),
	}); err != nil {
		return err
	}
	kubeconfig := c.paths.node(n, "kubelet.kubeconfig")
	if err := c.writeKubeconfig(kubeconfig, APIServerURL(), n.Name); err != nil {
		return err
	}
	return c.start(daemon{name: n.Name + "-kubelet", netns: n.Netns, hostname: n.Name, cgroup: daemonsCgroup, argv: []string{c.tool(kubeletBinary),
		"--config=" + config,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + dir,
		"--cert-dir=" + c.paths.node(n, "kubelet-pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(),
	}})
}
