package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The multi-node lab (NewCluster): several nodes, each a named namespace
// with its pods behind a bridge, on a shared node network that the test's
// own namespace (the "router": it also runs the API server) routes to the
// outside hosts, as a cloud VPC would.
//
//	client 198.19.200.2          lb 198.19.201.2        (outside the cluster)
//	   |                            |
//	   | to-client .200.1           | to-lb .201.1
//	router (the test's namespace; the API server on 127.0.0.1)
//	   | br-nodes 198.19.0.1/24; routes each pod CIDR to its node
//	   +------------------+------------------+
//	   | veth-n1          | veth-n2          | veth-n3
//	node-1 eth0 .0.11   node-2 eth0 .0.12   node-3 eth0 .0.13
//	  routes the other nodes' pod CIDRs via their node IPs
//	  cbr0 198.19.16.1/24  cbr0 198.19.17.1/24 ...
//	   |        |
//	pod web-1  pod client-1 ...  198.19.16.11/32, .12/32 …
//
// Pods hold a /32 address with the bridge's address as their only
// gateway, so pod-to-pod traffic on one node is routed through the node's
// IP stack too: service NAT is undone for it without br_netfilter, which
// the lab must not rely on (it is a host-wide module).
//
// Every node answers the API server's address on its own loopback (a
// forwarder, ServeAPI), so a proxy on a node uses the API server's
// kubeconfig unchanged, out of band like a control-plane endpoint.

// Cluster address plan.
const (
	// ClusterNodeCIDR is the node network; node i is .(10+i), the router .1.
	ClusterNodeCIDR = "198.19.0.0/24"
	// ClusterPodCIDR holds every node's pod CIDR, node i's being
	// 198.19.(15+i).0/24: the proxies' --cluster-cidr.
	ClusterPodCIDR = "198.19.16.0/20"

	clusterRouterIP = "198.19.0.1"
	maxClusterNodes = 9
	maxPodsPerNode  = 50
)

// Outside hosts' addresses.
var (
	clusterClientIP = netip.MustParseAddr("198.19.200.2")
	clusterLBIP     = netip.MustParseAddr("198.19.201.2")
)

// ClusterOptions shapes a multi-node lab.
type ClusterOptions struct {
	// Nodes is the number of nodes (default 3, at most 9).
	Nodes int
	// Pods names the pods created on every node; node i's pod "web" is the
	// host "web-i" (default: one pod, "web").
	Pods []string
}

// Cluster is a multi-node lab built by NewCluster.
type Cluster struct {
	// Router is the test's own namespace: the node network's gateway and
	// the API server's host.
	Router *Host
	// Client is a host outside the cluster, as a user on the Internet;
	// LB is another, as a cloud load balancer's health checker.
	Client, LB *Host
	Nodes      []*ClusterNode
	Options    ClusterOptions

	owner   *Topology // owns the hosts: their test, log directory, prefix
	removed sync.Once
}

// ClusterNode is one node: a namespace with a bridge and its pods.
type ClusterNode struct {
	// Host is the node's namespace; Host.Name is "node-i", Host.IPv4 its
	// address on the node network.
	*Host
	// PodCIDR is the node's pod range, Gateway its bridge address in it.
	PodCIDR netip.Prefix
	Gateway netip.Addr
	// Pods in ClusterOptions.Pods order.
	Pods []*Host
}

// Pod returns the node's pod called name in ClusterOptions.Pods, or nil.
func (n *ClusterNode) Pod(name string) *Host {
	for _, p := range n.Pods {
		if p.Name == name+"-"+n.index() {
			return p
		}
	}
	return nil
}

func (n *ClusterNode) index() string { return n.Name[len("node-"):] }

// NewCluster builds the multi-node lab and removes it when the test ends
// (processes started on its hosts first). It must run inside
// lab.InFreshNetns, whose namespace becomes the router.
func NewCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	c, err := newCluster(t, opts)
	if c != nil {
		t.Cleanup(c.remove)
	}
	if err != nil {
		t.Fatalf("building the multi-node lab: %v", err)
	}
	return c
}

func newCluster(t testing.TB, opts ClusterOptions) (*Cluster, error) {
	if os.Getenv(innerEnv) == "" {
		return nil, errors.New("lab.NewCluster must run inside lab.InFreshNetns: the test's namespace becomes the router, and must not be the host's")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Nodes < 1 || opts.Nodes > maxClusterNodes {
		return nil, fmt.Errorf("ClusterOptions.Nodes = %d, want 1..%d", opts.Nodes, maxClusterNodes)
	}
	if len(opts.Pods) == 0 {
		opts.Pods = []string{"web"}
	}
	if len(opts.Pods) > maxPodsPerNode {
		return nil, fmt.Errorf("ClusterOptions.Pods has %d pods, want at most %d", len(opts.Pods), maxPodsPerNode)
	}
	if _, err := net.InterfaceByName("br-nodes"); err == nil {
		return nil, errors.New("this namespace already holds a multi-node lab (link br-nodes exists)")
	}
	sweepStaleNamespaces(t)
	var rnd [3]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("random namespace suffix: %w", err)
	}
	owner := &Topology{t: t, logDir: t.TempDir(),
		prefix: fmt.Sprintf("%s%d-%s-", NamespacePrefix, os.Getpid(), hex.EncodeToString(rnd[:]))}
	c := &Cluster{Options: opts, owner: owner}
	c.Router = &Host{Name: "router", IPv4: netip.MustParseAddr(clusterRouterIP), topo: owner}
	c.Client = &Host{Name: HostClient, Netns: owner.prefix + "client", IPv4: clusterClientIP, topo: owner}
	c.LB = &Host{Name: "lb", Netns: owner.prefix + "lb", IPv4: clusterLBIP, topo: owner}
	for i := 1; i <= opts.Nodes; i++ {
		n := &ClusterNode{
			Host: &Host{Name: "node-" + strconv.Itoa(i), Netns: owner.prefix + "n" + strconv.Itoa(i),
				IPv4: netip.AddrFrom4([4]byte{198, 19, 0, byte(10 + i)}), topo: owner},
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(15 + i), 0}), 24),
			Gateway: netip.AddrFrom4([4]byte{198, 19, byte(15 + i), 1}),
		}
		n.PodIPv4 = n.Gateway
		for j, name := range opts.Pods {
			n.Pods = append(n.Pods, &Host{Name: name + "-" + strconv.Itoa(i),
				Netns: fmt.Sprintf("%sn%dp%d", owner.prefix, i, j+1),
				IPv4:  netip.AddrFrom4([4]byte{198, 19, byte(15 + i), byte(11 + j)}), topo: owner})
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c, c.build()
}

// hosts lists every namespace host of the cluster.
func (c *Cluster) hosts() []*Host {
	hosts := []*Host{c.Client, c.LB}
	for _, n := range c.Nodes {
		hosts = append(hosts, n.Host)
		hosts = append(hosts, n.Pods...)
	}
	return hosts
}

// noRedirects: a node that forwards a packet out of the link it came in by
// (a NodePort DNATed to another node, a pod's reply routed back onto its
// bridge) would otherwise tell the sender to go straight to the next hop,
// and the sender would then bypass the node's NAT.
var noRedirects = map[string]string{
	"net/ipv4/conf/all/send_redirects":       "0",
	"net/ipv4/conf/default/send_redirects":   "0",
	"net/ipv4/conf/all/accept_redirects":     "0",
	"net/ipv4/conf/default/accept_redirects": "0",
}

func (c *Cluster) build() error {
	var namespaces batch
	for _, h := range c.hosts() {
		namespaces.add("netns add %s", h.Netns)
	}
	if err := namespaces.run(c.Router); err != nil {
		return err
	}
	// Sysctls first: links take the "default" ones when they appear.
	routers := []*Host{c.Router}
	for _, n := range c.Nodes {
		routers = append(routers, n.Host)
	}
	for _, h := range routers {
		values := map[string]string{"net/ipv4/ip_forward": "1"}
		for k, v := range noRedirects {
			values[k] = v
		}
		if err := h.InNetns(func() error { return writeSysctls(values) }); err != nil {
			return fmt.Errorf("on %s: %w", h, err)
		}
	}

	var root batch
	root.add("link add br-nodes type bridge")
	root.add("addr add %s/24 dev br-nodes", clusterRouterIP)
	root.add("link set br-nodes up")
	for _, out := range []struct {
		link string
		h    *Host
	}{{"to-client", c.Client}, {"to-lb", c.LB}} {
		gw := out.h.IPv4.As4()
		gw[3] = 1
		root.add("link add %s type veth peer name eth0 netns %s", out.link, out.h.Netns)
		root.add("addr add %s/24 dev %s", netip.AddrFrom4(gw), out.link)
		root.add("link set %s up", out.link)
	}
	for i, n := range c.Nodes {
		veth := "veth-n" + strconv.Itoa(i+1)
		root.add("link add %s type veth peer name eth0 netns %s", veth, n.Netns)
		root.add("link set %s master br-nodes", veth)
		root.add("link set %s up", veth)
		// Pod CIDRs are routed to their nodes, as a VPC does.
		root.add("route add %s via %s", n.PodCIDR, n.IPv4)
	}
	if err := root.run(c.Router); err != nil {
		return err
	}

	var jobs []func() error
	for _, h := range []*Host{c.Client, c.LB} {
		jobs = append(jobs, func() error {
			gw := h.IPv4.As4()
			gw[3] = 1
			var b batch
			b.add("link set lo up")
			b.add("addr add %s/24 dev eth0", h.IPv4)
			b.add("link set eth0 up")
			b.add("route add default via %s dev eth0", netip.AddrFrom4(gw))
			return b.run(h)
		})
	}
	for _, n := range c.Nodes {
		jobs = append(jobs, func() error { return c.buildNode(n) })
	}
	errs := make(chan error, len(jobs))
	for _, job := range jobs {
		go func() { errs <- job() }()
	}
	var all []error
	for range jobs {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// buildNode wires one node: its node-network link, bridge, pods and the
// routes to the other nodes' pods.
func (c *Cluster) buildNode(n *ClusterNode) error {
	var b batch
	b.add("link set lo up")
	b.add("addr add %s/24 dev eth0", n.IPv4)
	b.add("link set eth0 up")
	b.add("route add default via %s dev eth0", clusterRouterIP)
	for _, other := range c.Nodes {
		if other != n {
			b.add("route add %s via %s dev eth0", other.PodCIDR, other.IPv4)
		}
	}
	b.add("link add cbr0 type bridge")
	b.add("addr add %s/24 dev cbr0", n.Gateway)
	b.add("link set cbr0 up")
	for j, p := range n.Pods {
		veth := "veth-p" + strconv.Itoa(j+1)
		b.add("link add %s type veth peer name eth0 netns %s", veth, p.Netns)
		b.add("link set %s master cbr0", veth)
		b.add("link set %s up", veth)
	}
	if err := b.run(n.Host); err != nil {
		return err
	}
	for _, p := range n.Pods {
		var pb batch
		pb.add("link set lo up")
		pb.add("addr add %s/32 dev eth0", p.IPv4)
		pb.add("link set eth0 up")
		pb.add("route add %s dev eth0 scope link", n.Gateway)
		pb.add("route add default via %s dev eth0", n.Gateway)
		if err := pb.run(p); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) remove() {
	c.removed.Do(func() {
		var links batch
		for _, name := range c.routerLinks() {
			if _, err := net.InterfaceByName(name); err == nil {
				links.add("link del %s", name)
			}
		}
		var err error
		if len(links.lines) > 0 {
			err = links.run(c.Router)
		}
		if err := errors.Join(err, deleteNamespaces(c.owner.prefix)); err != nil {
			c.owner.t.Errorf("removing the multi-node lab: %v", err)
		}
	})
}

func (c *Cluster) routerLinks() []string {
	names := []string{"to-client", "to-lb", "br-nodes"}
	for i := range c.Nodes {
		names = append(names, "veth-n"+strconv.Itoa(i+1))
	}
	return names
}

// Namespaces lists the `ip netns` names of the cluster's hosts.
func (c *Cluster) Namespaces() []string {
	var names []string
	for _, h := range c.hosts() {
		names = append(names, h.Netns)
	}
	return names
}

// NodeOf returns the node a pod host runs on, or nil.
func (c *Cluster) NodeOf(pod *Host) *ClusterNode {
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			if p == pod {
				return n
			}
		}
	}
	return nil
}

// PodNamed returns the pod host called name (such as "web-2"), or nil.
func (c *Cluster) PodNamed(name string) *Host {
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			if p.Name == name {
				return p
			}
		}
	}
	return nil
}

// RegisterNodes creates a Node object per node, as kubelet would: its
// node-network address as InternalIP, its hostname, its pod CIDR, Ready.
func (c *Cluster) RegisterNodes(t testing.TB, client kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		node, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{v1.LabelHostname: n.Name}},
			Spec:       v1.NodeSpec{PodCIDR: n.PodCIDR.String(), PodCIDRs: []string{n.PodCIDR.String()}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating node %s: %v", n.Name, err)
		}
		now := metav1.Now()
		node.Status.Addresses = []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: n.IPv4.String()},
			{Type: v1.NodeHostName, Address: n.Name},
		}
		node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue,
			LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KubeletReady"}}
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the status of node %s: %v", n.Name, err)
		}
	}
}

// ServeAPI makes the API server reachable from every node at the address
// it has in the router (127.0.0.1:port), so api.KubeconfigPath works there
// unchanged: a listener on each node's loopback relays connections to it.
// The relays close when t ends.
func (c *Cluster) ServeAPI(t testing.TB, api *APIServer) {
	t.Helper()
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatalf("parsing the API server URL %q: %v", api.URL, err)
	}
	for _, n := range c.Nodes {
		ln, err := n.Listen("tcp", u.Host)
		if err != nil {
			t.Fatalf("listening for the API server on %s: %v", n.Name, err)
		}
		t.Cleanup(func() { ln.Close() })
		go relay(ln, u.Host)
	}
}

// relay accepts on ln until it is closed and copies each connection to and
// from target, dialled in the calling process's own namespace.
func relay(ln net.Listener, target string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer in.Close()
			out, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(out, in)
			go pipe(in, out)
			<-done
			<-done
		}()
	}
}
