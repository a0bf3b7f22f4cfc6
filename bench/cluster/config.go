package cluster

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
)

// Address plan (inside the namespaces only).
const (
	// RouterIP is the router's address on the node network, where the API
	// server listens.
	RouterIP = "198.19.0.1"
	// APIServerPort is the API server's port on RouterIP.
	APIServerPort = 6443
	// PodCIDR holds every node's pod range: kproxy's clusterCIDR.
	PodCIDR = "198.19.16.0/20"
	// ServiceCIDR is the API server's service-cluster-ip-range.
	ServiceCIDR = "198.18.0.0/16"
	// KubernetesServiceIP is the kubernetes Service's ClusterIP.
	KubernetesServiceIP = "198.18.0.1"
	// ClusterDNSIP is the cluster DNS Service's ClusterIP, the kubelets'
	// clusterDNS, when the cluster runs CoreDNS (Config.CoreDNS).
	ClusterDNSIP = "198.18.0.10"
	// ClusterDomain is the kubelets' clusterDomain.
	ClusterDomain = "cluster.local"

	// MaxNodes bounds the node count: pod ranges stay inside PodCIDR.
	MaxNodes = 9
	// DefaultStateDir holds everything the cluster writes.
	DefaultStateDir = "/var/tmp/kproxy-cluster"
	// DefaultAPIPort is the host loopback port the forwarder listens on.
	DefaultAPIPort = 16443
)

// Names on the host.
const (
	netnsPrefix = "kpc-"
	routerNetns = netnsPrefix + "router"
	// cgroupRoot holds every process of the cluster; nodes' pods go under
	// cgroupRoot/node-N, daemons under cgroupRoot/daemons.
	cgroupRoot    = "kproxy-cluster"
	daemonsCgroup = cgroupRoot + "/daemons"
)

// Config describes a cluster to bring up.
type Config struct {
	// Nodes is the number of nodes, 1 to MaxNodes.
	Nodes int
	// StateDir holds certificates, configs, data, logs and the nodes'
	// container stores.
	StateDir string
	// ToolsBin holds kube-apiserver, etcd, kubelet, kube-controller-manager
	// and kube-scheduler (make tools, make cluster-tools).
	ToolsBin string
	// Image is kproxy's OCI archive (make image).
	Image string
	// Manifest is deploy/base/kproxy.yaml.
	Manifest string
	// RepoRoot is the kproxy checkout (the smoke server is built from it).
	RepoRoot string
	// APIPort is the host loopback port that reaches the API server.
	APIPort int
	// Self is the kcluster binary, which starts the daemons in their
	// namespaces and cgroups (its run-in command) and runs the forwarder.
	Self string
	// Images, if set, is a directory of OCI archives (*.oci.tar) to import
	// into every node's containerd under the names they carry, for pods
	// that cannot pull them from a registry.
	Images string
	// CoreDNS, if set, is a static CoreDNS binary (bench/tools/coredns): the
	// cluster then runs it as its DNS, at ClusterDNSIP.
	CoreDNS string
	// PauseNames are further names of PauseImage in every node, for pods
	// that run the pause image by its upstream name (e2e.test's do).
	PauseNames []string
}

// Validate checks the fields Up needs.
func (c Config) Validate() error {
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return fmt.Errorf("nodes = %d, want 1..%d", c.Nodes, MaxNodes)
	}
	if c.APIPort <= 0 || c.APIPort > 65535 {
		return fmt.Errorf("API port %d out of range", c.APIPort)
	}
	for name, v := range map[string]string{"state directory": c.StateDir, "tools directory": c.ToolsBin,
		"image": c.Image, "manifest": c.Manifest, "repository root": c.RepoRoot, "kcluster binary": c.Self} {
		if v == "" {
			return fmt.Errorf("no %s given", name)
		}
		if !filepath.IsAbs(v) {
			return fmt.Errorf("%s %q is not an absolute path", name, v)
		}
	}
	for name, v := range map[string]string{"images directory": c.Images, "CoreDNS binary": c.CoreDNS} {
		if v != "" && !filepath.IsAbs(v) {
			return fmt.Errorf("%s %q is not an absolute path", name, v)
		}
	}
	return nil
}

// Node is one node's names and addresses.
type Node struct {
	Index int
	Name  string // node-N: the Node object, the hostname
	Netns string // the ip netns name
	IP    netip.Addr
	// PodCIDR is the node's pod range; Gateway is the node's address in it.
	PodCIDR netip.Prefix
	Gateway netip.Addr
}

// NodeAt returns node i (1-based) of the address plan.
func NodeAt(i int) Node {
	return Node{
		Index:   i,
		Name:    "node-" + strconv.Itoa(i),
		Netns:   netnsPrefix + "node-" + strconv.Itoa(i),
		IP:      netip.AddrFrom4([4]byte{198, 19, 0, byte(10 + i)}),
		PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(15 + i), 0}), 24),
		Gateway: netip.AddrFrom4([4]byte{198, 19, byte(15 + i), 1}),
	}
}

// Nodes returns the first n nodes of the address plan.
func Nodes(n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = NodeAt(i + 1)
	}
	return nodes
}

// NetnsPath is where ip netns keeps a namespace's handle.
func NetnsPath(name string) string { return filepath.Join("/run/netns", name) }

// RouterNetnsPath is the router namespace's handle.
func RouterNetnsPath() string { return NetnsPath(routerNetns) }

// cgroup is the node's cgroup root (the kubelet's cgroupRoot).
func (n Node) cgroup() string { return cgroupRoot + "/" + n.Name }

// Paths inside the state directory.
type paths struct{ dir string }

func (p paths) pki(name string) string    { return filepath.Join(p.dir, "pki", name) }
func (p paths) logDir() string            { return filepath.Join(p.dir, "logs") }
func (p paths) logs(name string) string   { return filepath.Join(p.logDir(), name+".log") }
func (p paths) images(name string) string { return filepath.Join(p.dir, "images", name) }
func (p paths) node(n Node, parts ...string) string {
	return filepath.Join(append([]string{p.dir, n.Name}, parts...)...)
}
func (p paths) control(parts ...string) string {
	return filepath.Join(append([]string{p.dir, "control"}, parts...)...)
}

// AdminKubeconfig is the kubeconfig kubectl uses from the host.
func AdminKubeconfig(stateDir string) string { return filepath.Join(stateDir, "admin.kubeconfig") }

func (n Node) containerdSocket(p paths) string { return p.node(n, "containerd", "containerd.sock") }
