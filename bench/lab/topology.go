package lab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The lab topology (NewTopology). The node is the test's own network
// namespace (the one lab.InFreshNetns made), so kproxy running in-process,
// iptables run by the test and lab.StartAPIServer all live on the node; the
// client and the backends are named namespaces (`ip netns`), so operators can
// `ip netns exec kp-…-client …` into them while a test is paused.
//
//	client (kp-<pid>-<rand>-client)
//	  eth0 198.19.0.2/24  fd00:19::2/64
//	  default via 198.19.0.1 / fd00:19::1  (VIPs 198.18.0.0/16, fd00:18::/64, pods)
//	       |
//	       | veth
//	       |
//	node (the test's namespace; ip_forward on; runs kproxy, the API server)
//	  to-client 198.19.0.1/24  fd00:19::1/64   default via 198.19.0.2 / fd00:19::2
//	  br-pods   198.19.1.1/24  fd00:19:1::1/64
//	   |               |               |
//	   | veth-b1       | veth-b2       | veth-b3 …
//	   |               |               |
//	backend-1       backend-2       backend-3     (kp-<pid>-<rand>-b1 …)
//	eth0 .11        eth0 .12        eth0 .13      198.19.1.0/24, fd00:19:1::11 …
//	default via 198.19.1.1 / fd00:19:1::1
const (
	// HostClient and HostNode name the two fixed hosts; backends are
	// "backend-1" … "backend-N".
	HostClient = "client"
	HostNode   = "node"

	// NamespacePrefix starts the name of every namespace the lab creates:
	// kp-<pid of the creating test process>-<random>-<host>.
	NamespacePrefix = "kp-"

	maxBackends = 200
)

// Lab address ranges. Service VIPs (ClusterIPs, externalIPs, LoadBalancer
// ingress) should come from ServiceCIDR / ServiceCIDR6: the client routes
// them (all its traffic, in fact) to the node. IPv6 addresses get the
// "nodad" flag, so they are usable at once.
const (
	ServiceCIDR6    = "fd00:18::/64"
	ClientLinkCIDR  = "198.19.0.0/24"
	ClientLinkCIDR6 = "fd00:19::/64"
	PodCIDR         = "198.19.1.0/24"
	PodCIDR6        = "fd00:19:1::/64"
)

// Fixed host addresses (read-only).
var (
	clientAddr   = netip.MustParseAddr("198.19.0.2")
	clientAddr6  = netip.MustParseAddr("fd00:19::2")
	nodeAddr     = netip.MustParseAddr("198.19.0.1")
	nodeAddr6    = netip.MustParseAddr("fd00:19::1")
	nodePodAddr  = netip.MustParseAddr("198.19.1.1")
	nodePodAddr6 = netip.MustParseAddr("fd00:19:1::1")
)

const (
	firstBackend  = 11 // backend-1's last address byte
	backendPrefix = "backend-"
)

// TopologyOptions shapes a lab topology. The zero value is three IPv4-only
// backends with MTU 1500.
type TopologyOptions struct {
	// Backends is the number of backend hosts (default 3, at most 200).
	Backends int
	// DualStack adds the fd00: IPv6 addresses and routes next to IPv4.
	DualStack bool
	// MTU of every link (default 1500, like a real network).
	MTU int
}

// Topology is a client, a node and backends built by NewTopology.
type Topology struct {
	Client   *Host
	Node     *Host
	Backends []*Host
	Options  TopologyOptions

	t       testing.TB
	prefix  string // kp-<pid>-<rand>-
	logDir  string
	removed sync.Once
}

// Host is one machine of the topology: a named network namespace, or, for
// the node, the test's own namespace.
type Host struct {
	// Name is "client", "node" or "backend-i".
	Name string
	// Netns is the `ip netns` name, empty for the node (the test's namespace).
	Netns string
	// IPv4 and IPv6 are the host's address on its link (for the node, on the
	// client link); IPv6 is invalid unless the topology is dual-stack.
	IPv4, IPv6 netip.Addr
	// PodIPv4 and PodIPv6 are set on the node only: its address on the
	// backends' bridge, the backends' default gateway.
	PodIPv4, PodIPv6 netip.Addr

	topo *Topology
}

// NewTopology builds the lab topology (see the picture above) and removes
// it when the test ends, failed or not: processes started with Host.Start
// are killed first, then the namespaces are deleted. It must run inside
// lab.InFreshNetns, whose namespace becomes the node. Namespaces left by
// test processes that died without cleaning up are removed first.
func NewTopology(t testing.TB, opts TopologyOptions) *Topology {
	t.Helper()
	topo, err := newTopology(t, opts)
	if topo != nil {
		t.Cleanup(topo.remove)
	}
	if err != nil {
		t.Fatalf("building the lab topology: %v", err)
	}
	return topo
}

// newTopology builds a topology without registering its removal, for
// callers (benchmarks) that build many; on error the partial topology is
// returned so the caller can remove it.
func newTopology(t testing.TB, opts TopologyOptions) (*Topology, error) {
	if os.Getenv(innerEnv) == "" {
		return nil, fmt.Errorf("lab.NewTopology must run inside lab.InFreshNetns: the test's namespace becomes the node, and must not be the host's")
	}
	if opts.Backends == 0 {
		opts.Backends = 3
	}
	if opts.Backends < 1 || opts.Backends > maxBackends {
		return nil, fmt.Errorf("TopologyOptions.Backends = %d, want 1..%d", opts.Backends, maxBackends)
	}
	if opts.MTU == 0 {
		opts.MTU = 1500
	}
	if opts.MTU < 1280 || opts.MTU > 65535 {
		return nil, fmt.Errorf("TopologyOptions.MTU = %d, want 1280..65535", opts.MTU)
	}
	if _, err := net.InterfaceByName("br-pods"); err == nil {
		return nil, errors.New("this namespace already holds a lab topology (link br-pods exists): build one topology per lab.InFreshNetns test")
	}
	sweepStaleNamespaces(t)

	var rnd [3]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("random namespace suffix: %w", err)
	}
	topo := &Topology{
		Options: opts,
		t:       t,
		prefix:  fmt.Sprintf("%s%d-%s-", NamespacePrefix, os.Getpid(), hex.EncodeToString(rnd[:])),
		logDir:  t.TempDir(),
	}
	topo.Node = &Host{Name: HostNode, IPv4: nodeAddr, PodIPv4: nodePodAddr, topo: topo}
	topo.Client = &Host{Name: HostClient, Netns: topo.prefix + "client", IPv4: clientAddr, topo: topo}
	if opts.DualStack {
		topo.Node.IPv6, topo.Node.PodIPv6, topo.Client.IPv6 = nodeAddr6, nodePodAddr6, clientAddr6
	}
	for i := 1; i <= opts.Backends; i++ {
		v4, v6 := backendAddrs(i)
		b := &Host{
			Name:  backendPrefix + strconv.Itoa(i),
			Netns: topo.prefix + "b" + strconv.Itoa(i),
			IPv4:  v4,
			topo:  topo,
		}
		if opts.DualStack {
			b.IPv6 = v6
		}
		topo.Backends = append(topo.Backends, b)
	}
	return topo, topo.build()
}

// backendAddrs returns backend i's addresses: .(10+i) on the pod network,
// and the IPv6 address written with the same digits (fd00:19:1::11), so the
// two read alike in logs.
func backendAddrs(i int) (v4, v6 netip.Addr) {
	b := nodePodAddr.As4()
	b[3] = byte(firstBackend - 1 + i)
	v6 = netip.MustParseAddr(fmt.Sprintf("fd00:19:1::%d", firstBackend-1+i))
	return netip.AddrFrom4(b), v6
}

// build wires the namespaces with two `ip -batch` runs per namespace instead
// of one process per command, which keeps a topology under ~100 ms.
func (topo *Topology) build() error {
	opts := topo.Options
	mtu := strconv.Itoa(opts.MTU)
	var namespaces batch
	for _, ns := range topo.Namespaces() {
		namespaces.add("netns add %s", ns)
	}
	if err := namespaces.run(topo.Node); err != nil {
		return err
	}
	if opts.DualStack {
		// Links take their IPv6 settings from "default" when they arrive in
		// a namespace; without duplicate address detection no address
		// (link-local ones included) sits "tentative" for seconds.
		noDAD := map[string]string{"net/ipv6/conf/default/accept_dad": "0", "net/ipv6/conf/all/accept_dad": "0"}
		for _, h := range append([]*Host{topo.Node, topo.Client}, topo.Backends...) {
			if err := h.InNetns(func() error { return writeSysctls(noDAD) }); err != nil {
				return fmt.Errorf("on %s: %w", h, err)
			}
		}
	}
	var root batch
	root.add("link add to-client mtu %s type veth peer name eth0 mtu %s netns %s", mtu, mtu, topo.Client.Netns)
	root.add("link add br-pods mtu %s type bridge", mtu)
	for i, b := range topo.Backends {
		veth := "veth-b" + strconv.Itoa(i+1)
		root.add("link add %s mtu %s type veth peer name eth0 mtu %s netns %s", veth, mtu, mtu, b.Netns)
		root.add("link set %s master br-pods", veth)
		// Hairpin, as kubelet sets it: a pod whose service traffic is
		// DNATed back to itself gets it through the port it came in by.
		root.add("link set %s type bridge_slave hairpin on", veth)
		root.add("link set %s up", veth)
	}
	root.add("addr add %s/24 dev to-client", nodeAddr)
	root.add("addr add %s/24 dev br-pods", nodePodAddr)
	if opts.DualStack {
		root.add("addr add %s/64 dev to-client nodad", nodeAddr6)
		root.add("addr add %s/64 dev br-pods nodad", nodePodAddr6)
	}
	root.add("link set to-client up")
	root.add("link set br-pods up")
	root.add("route add default via %s dev to-client", clientAddr)
	if opts.DualStack {
		root.add("route add default via %s dev to-client", clientAddr6)
	}
	if err := writeSysctls(map[string]string{"net/ipv4/ip_forward": "1"}); err != nil {
		return err
	}
	if opts.DualStack {
		if err := writeSysctls(map[string]string{"net/ipv6/conf/all/forwarding": "1"}); err != nil {
			return err
		}
	}
	if err := root.run(topo.Node); err != nil {
		return err
	}

	hosts := append([]*Host{topo.Client}, topo.Backends...)
	errs := make(chan error, len(hosts))
	for _, h := range hosts {
		go func() {
			var b batch
			gw, gw6 := nodeAddr, nodeAddr6
			if h != topo.Client {
				gw, gw6 = nodePodAddr, nodePodAddr6
			}
			b.add("link set lo up")
			b.add("addr add %s/24 dev eth0", h.IPv4)
			if opts.DualStack {
				b.add("addr add %s/64 dev eth0 nodad", h.IPv6)
			}
			b.add("link set eth0 up")
			b.add("route add default via %s dev eth0", gw)
			if opts.DualStack {
				b.add("route add default via %s dev eth0", gw6)
			}
			errs <- b.run(h)
		}()
	}
	var first error
	for range hosts {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// remove deletes the topology's namespaces. Processes started in them were
// registered for cleanup after the topology, so they are already dead.
func (topo *Topology) remove() {
	topo.removed.Do(func() {
		// The node's links first: namespace teardown (and with it the
		// veth pairs) finishes asynchronously in the kernel, and the node
		// outlives the topology.
		var links batch
		for _, name := range topo.nodeLinks() {
			if _, err := net.InterfaceByName(name); err == nil {
				links.add("link del %s", name)
			}
		}
		var err error
		if len(links.lines) > 0 {
			err = links.run(topo.Node)
		}
		if err := errors.Join(err, deleteNamespaces(topo.prefix)); err != nil {
			topo.t.Errorf("removing the lab topology: %v", err)
		}
	})
}

// nodeLinks names the links the topology adds to the node.
func (topo *Topology) nodeLinks() []string {
	names := []string{"to-client", "br-pods"}
	for i := range topo.Backends {
		names = append(names, "veth-b"+strconv.Itoa(i+1))
	}
	return names
}

// Host returns the host named name ("client", "node", "backend-i"), or nil.
func (topo *Topology) Host(name string) *Host {
	switch name {
	case HostClient:
		return topo.Client
	case HostNode:
		return topo.Node
	}
	for _, b := range topo.Backends {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// Namespaces lists the `ip netns` names of the topology's hosts.
func (topo *Topology) Namespaces() []string {
	names := []string{topo.Client.Netns}
	for _, b := range topo.Backends {
		names = append(names, b.Netns)
	}
	return names
}

// Addr returns the host's address of the given family (4 or 6): invalid when
// the topology is not dual-stack and family is 6.
func (h *Host) Addr(family int) netip.Addr {
	if family == 6 {
		return h.IPv6
	}
	return h.IPv4
}

func (h *Host) String() string {
	if h.Netns == "" {
		return h.Name + " (the test's namespace)"
	}
	return h.Name + " (netns " + h.Netns + ")"
}

// Command returns a command that runs in the host's namespace; the caller
// starts it and owns it. Prefer Exec or Start, which also clean up.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	if h.Netns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", h.Netns, name}, args...)...)
}

// Exec runs a command in the host's namespace and returns its combined
// output; the error names the host and includes the output.
func (h *Host) Exec(name string, args ...string) (string, error) {
	out, err := h.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %w\n%s", strings.Join(append([]string{name}, args...), " "), h, err, indent(out))
	}
	return string(out), nil
}

// MustExec is Exec that fails the test on error.
func (h *Host) MustExec(name string, args ...string) string {
	h.topo.t.Helper()
	out, err := h.Exec(name, args...)
	if err != nil {
		h.topo.t.Fatal(err)
	}
	return out
}

// batch collects ip(8) commands for one `ip -batch -` run.
type batch struct{ lines []string }

func (b *batch) add(format string, args ...any) {
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
}

func (b *batch) run(h *Host) error {
	args := []string{"-batch", "-"}
	if h.Netns != "" {
		args = append([]string{"-n", h.Netns}, args...)
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(b.lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s on %s: %w\n%s\ncommands:\n%s", strings.Join(args, " "), h, err, indent(out),
			indent([]byte(strings.Join(b.lines, "\n"))))
	}
	return nil
}

// writeSysctls sets sysctls of the calling thread's namespace (the node).
func writeSysctls(values map[string]string) error {
	for key, value := range values {
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
			return fmt.Errorf("setting sysctl %s=%s: %w", strings.ReplaceAll(key, "/", "."), value, err)
		}
	}
	return nil
}

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = "/run/netns"

// listNamespaces returns the named namespaces starting with prefix.
func listNamespaces(prefix string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", netnsDir, err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// deleteNamespaces deletes every named namespace starting with prefix in
// one `ip -batch` run (-force: go on past one that is already gone).
func deleteNamespaces(prefix string) error {
	names, err := listNamespaces(prefix)
	if err != nil || len(names) == 0 {
		return err
	}
	var b batch
	for _, n := range names {
		b.add("netns del %s", n)
	}
	cmd := exec.Command("ip", "-force", "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(b.lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("deleting namespaces %s: %w\n%s", strings.Join(names, " "), err, indent(out))
	}
	if left, err := listNamespaces(prefix); err != nil || len(left) > 0 {
		return fmt.Errorf("namespaces %v left after deleting them (%v)", left, err)
	}
	return nil
}

// sweepStaleNamespaces deletes lab namespaces whose creating test process
// has died (killed by a timeout or SIGKILL, so its cleanup never ran). The
// pid in the name tells whose they are; live processes' are left alone.
func sweepStaleNamespaces(t testing.TB) {
	names, err := listNamespaces(NamespacePrefix)
	if err != nil {
		t.Logf("looking for stale lab namespaces: %v", err)
		return
	}
	dead := map[string]bool{}
	for _, n := range names {
		pid, _, ok := strings.Cut(strings.TrimPrefix(n, NamespacePrefix), "-")
		if !ok {
			continue
		}
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", pid)); os.IsNotExist(err) {
			dead[NamespacePrefix+pid+"-"] = true
		}
	}
	for prefix := range dead {
		if err := deleteNamespaces(prefix); err != nil {
			t.Logf("removing stale lab namespaces %s*: %v", prefix, err)
		} else {
			t.Logf("removed stale lab namespaces %s* left by a test process that died", prefix)
		}
	}
}
