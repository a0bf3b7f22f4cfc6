package rules

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestSameRulesAsKubeProxy runs the real kube-proxy (v1.36, bench/tools)
// in iptables mode against a real API server, in a fresh network
// namespace, and checks that its iptables-save shows exactly the chains and
// rules the model builds from the same objects: an operator can swap one
// for the other and every chain keeps its name and content.
//
// One thing kube-proxy adds is set aside, as the model leaves it out on
// purpose: the empty KUBE-FIREWALL chain and its jumps where kube-proxy
// puts no rule in it.
func TestSameRulesAsKubeProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver, etcd and kube-proxy")
	}
	if lab.InFreshNetns(t) {
		return
	}
	compareRulesWithKubeProxy(t, kubeProxyCase{
		flags: []string{"--cluster-cidr", "198.19.1.0/24"},
		v4:    func(c *Config) { c.ClusterCIDRs = testkit.Prefixes("198.19.1.0/24") },
	})
}

// TestSameRulesAsKubeProxyWithDetectors is TestSameRulesAsKubeProxy with
// each other local-traffic detector kube-proxy has (--detect-local-mode):
// the Node's pod CIDRs, a bridge, an interface name prefix.
func TestSameRulesAsKubeProxyWithDetectors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver, etcd and kube-proxy")
	}
	for _, tc := range []struct {
		name string
		kubeProxyCase
	}{
		{"NodeCIDR", kubeProxyCase{
			flags:    []string{"--detect-local-mode", "NodeCIDR", "--cluster-cidr", "198.19.0.0/16"},
			podCIDRs: []string{"198.19.1.0/24"},
			// The mode sets the rule model's ranges to the Node's pod CIDRs.
			v4: func(c *Config) { c.ClusterCIDRs = testkit.Prefixes("198.19.1.0/24") },
		}},
		{"BridgeInterface", kubeProxyCase{
			flags: []string{"--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "cbr0", "--cluster-cidr", "198.19.0.0/16"},
			both:  func(c *Config) { c.BridgeInterface = "cbr0" },
		}},
		{"InterfaceNamePrefix", kubeProxyCase{
			flags: []string{"--detect-local-mode", "InterfaceNamePrefix", "--pod-interface-name-prefix", "veth"},
			both:  func(c *Config) { c.InterfaceNamePrefix = "veth" },
		}},
		// Not a detector, but the same comparison: the external IPs the
		// AllowServiceExternalIPs gate hides.
		{"AllowServiceExternalIPs off", kubeProxyCase{
			flags:             []string{"--cluster-cidr", "198.19.1.0/24", "--feature-gates", "AllowServiceExternalIPs=false"},
			v4:                func(c *Config) { c.ClusterCIDRs = testkit.Prefixes("198.19.1.0/24") },
			ignoreExternalIPs: true,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if lab.InFreshNetns(t) {
				return
			}
			compareRulesWithKubeProxy(t, tc.kubeProxyCase)
		})
	}
}

// kubeProxyCase is one comparison: kube-proxy's extra flags, the Node's pod
// CIDRs, and the rule model's configuration to match (v4: the IPv4 family's;
// both: both families').
type kubeProxyCase struct {
	flags    []string
	podCIDRs []string
	v4, both func(*Config)
	// ignoreExternalIPs: the map as with AllowServiceExternalIPs off.
	ignoreExternalIPs bool
}

// compareRulesWithKubeProxy runs kube-proxy on the fixtures and compares its
// tables with the model's, family by family.
func compareRulesWithKubeProxy(t *testing.T, tc kubeProxyCase) {
	t.Helper()
	kubeProxy := filepath.Join(lab.ToolsBinDir(t), "kube-proxy")
	if _, err := os.Stat(kubeProxy); err != nil {
		t.Fatalf("kube-proxy not built: run `make tools`: %v", err)
	}
	api := lab.StartAPIServer(t)
	node := lab.CreateNode(t, api.Client, testkit.NodeName, testkit.NodeIPv4)
	node.Labels[v1.LabelTopologyZone] = "zone-a"
	if len(tc.podCIDRs) > 0 {
		node.Spec.PodCIDR, node.Spec.PodCIDRs = tc.podCIDRs[0], tc.podCIDRs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, err := api.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createKubeProxyFixtures(ctx, t, api.Client)

	// The model's view of the same objects, including the API server's
	// own default/kubernetes service.
	tr := servicemap.NewTracker(testkit.NodeName, nil)
	if tc.ignoreExternalIPs {
		tr.IgnoreExternalIPs()
	}
	tr.OnNodeUpdate(node)
	svcs, err := api.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		tr.OnServiceUpdate(&svcs.Items[i])
	}
	epSlices, err := api.Client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range epSlices.Items {
		tr.OnEndpointSliceUpdate(&epSlices.Items[i])
	}
	tr.OnSynced()
	snap, _ := tr.Snapshot()
	want := map[ipfamily.Family]ruleset{}
	for _, cfg := range []Config{v4Config(), {Family: ipfamily.IPv6, MasqueradeBit: 14}} {
		if tc.v4 != nil && cfg.Family == ipfamily.IPv4 {
			tc.v4(&cfg)
		}
		if tc.both != nil {
			tc.both(&cfg)
		}
		// kube-proxy's defaults: localhost NodePorts on, --random-fully
		// where iptables has it (1.8.9 does).
		cfg.LocalhostNodePorts, cfg.RandomFully = true, true
		// kube-proxy counts in both nfacct objects where the kernel has
		// them, as this one does.
		cfg.NFAcct = NFAcct{CTStateInvalidDropped: true, LocalhostNodePortsAccepted: true}
		cfg.Topology = servicemap.TopologyOf(testkit.NodeName, snap)
		b := mustBuilder(t, cfg)
		var ports []PortRules
		for _, sp := range snap.All() {
			ports = append(ports, mustPorts(t, b, sp)...)
		}
		want[cfg.Family] = assemble(b, ports)
	}

	args := append([]string{"--kubeconfig", api.KubeconfigPath, "--proxy-mode", "iptables",
		"--hostname-override", testkit.NodeName,
		// Conntrack settings are global or absent in a namespace: leave them.
		"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "0",
		"--conntrack-tcp-timeout-close-wait", "0", "-v", "2"}, tc.flags...)
	proxy := exec.Command(kubeProxy, args...)
	logPath := filepath.Join(t.TempDir(), "kube-proxy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	proxy.Stdout, proxy.Stderr = logFile, logFile
	if err := proxy.Start(); err != nil {
		t.Fatalf("starting kube-proxy: %v", err)
	}
	defer func() {
		_ = proxy.Process.Kill()
		_ = proxy.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("kube-proxy log:\n%s", tailOf(string(out), 8000))
		}
	}()

	started, nudged := time.Now(), false
	for _, fam := range ipfamily.All() {
		var got map[Table]savedTable
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got = kubeProxyDump(t, fam)
			if tablesMatch(got, want[fam]) || time.Now().After(deadline) {
				break
			}
			if !nudged && time.Since(started) > kubeProxyTopologyWait {
				nudgeZone(ctx, t, api.Client, node.Labels[v1.LabelTopologyZone])
				nudged = true
			}
			time.Sleep(300 * time.Millisecond)
		}
		t.Run(string(fam), func(t *testing.T) {
			for _, tbl := range tableOrder() {
				compareWithKubeProxy(t, tbl, got[tbl], want[fam])
			}
		})
	}
}

// kubeProxyTopologyWait is how long compareRulesWithKubeProxy lets
// kube-proxy's tables differ before it suspects a missed zone (nudgeZone).
const kubeProxyTopologyWait = 15 * time.Second

// nudgeZone moves the node to another zone and back. kube-proxy v1.36
// registers its topology handler after the node informer that feeds it has
// started, so the node's first event can pass before the handler is there:
// kube-proxy then ignores the zone hints ("node is missing label") until the
// zone changes, which in this lab, with no kubelet, it never does. Two
// changes reach the handler for sure; the rules wanted are the final zone's.
func nudgeZone(ctx context.Context, t *testing.T, client kubernetes.Interface, zone string) {
	t.Helper()
	t.Logf("kube-proxy's rules still differ after %v: moving the node out of zone %q and back, in case kube-proxy missed it at start", kubeProxyTopologyWait, zone)
	for _, z := range []string{zone + "-elsewhere", zone} {
		node, err := client.CoreV1().Nodes().Get(ctx, testkit.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Labels[v1.LabelTopologyZone] = z
		if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the node's zone to %q: %v", z, err)
		}
	}
}

// kubeProxyDump reads the family's tables from whichever backend
// kube-proxy wrote, without what the model leaves out on purpose.
func kubeProxyDump(t *testing.T, fam ipfamily.Family) map[Table]savedTable {
	t.Helper()
	for _, be := range kernel.Backends() {
		out, err := exec.Command(be.SaveCommand(fam)).Output()
		if err != nil || !strings.Contains(string(out), ":KUBE-SERVICES") {
			continue
		}
		tables, err := parseSave(string(out))
		if err != nil {
			t.Fatal(err)
		}
		return withoutDeliberateDifferences(tables)
	}
	return nil
}

// withoutDeliberateDifferences drops an empty KUBE-FIREWALL with the jumps
// to it.
func withoutDeliberateDifferences(tables map[Table]savedTable) map[Table]savedTable {
	for tbl, chains := range tables {
		emptyKubeletFirewall := false
		for _, c := range chains {
			if c.Name == KubeletFirewall && len(c.Rules) == 0 {
				emptyKubeletFirewall = true
			}
		}
		if emptyKubeletFirewall {
			chains = slices.DeleteFunc(chains, func(c Chain) bool { return c.Name == KubeletFirewall })
			for i := range chains {
				chains[i].Rules = slices.DeleteFunc(chains[i].Rules, func(r string) bool { return r == "-j "+KubeletFirewall })
			}
		}
		tables[tbl] = chains
	}
	return tables
}

// tablesMatch says whether kube-proxy's dump already equals the model.
func tablesMatch(got map[Table]savedTable, want ruleset) bool {
	for _, tbl := range tableOrder() {
		rec := &recorder{}
		compareWithKubeProxy(rec, tbl, got[tbl], want)
		if rec.failed {
			return false
		}
	}
	return true
}

// recorder is the part of testing.T compareWithKubeProxy uses, for polling.
type recorder struct{ failed bool }

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }

type errorer interface {
	Helper()
	Errorf(format string, args ...any)
}

// compareWithKubeProxy compares one table: the same KUBE-* chains, each
// with the same rules. kube-proxy writes service ports in map order, so the
// per-port rules of shared chains compare as sets, with the fixed rules
// last; every other chain compares in order.
func compareWithKubeProxy(t errorer, tbl Table, got savedTable, want ruleset) {
	t.Helper()
	wantChains := append(slices.Clone(want.jumps[tbl]), want.chains[tbl]...)
	shared := map[string]bool{}
	for _, c := range want.chains[tbl] {
		if !IsPortChain(c.Name) {
			shared[c.Name] = true
		}
	}
	for _, w := range wantChains {
		i := indexOfChain(got, w.Name)
		if i < 0 {
			if len(w.Rules) > 0 || !isBuiltin(w.Name) {
				t.Errorf("%s table: kube-proxy has no chain %s", tbl, w.Name)
			}
			continue
		}
		g, wr := got[i].Rules, w.Rules
		if shared[w.Name] {
			g, wr = slices.Sorted(slices.Values(g)), slices.Sorted(slices.Values(wr))
		}
		if !slices.Equal(g, wr) {
			t.Errorf("%s table, chain %s:\n%s", tbl, w.Name, testkit.LineDiff(strings.Join(wr, "\n"), strings.Join(g, "\n")))
		}
	}
	for _, g := range got {
		if indexOfChain(wantChains, g.Name) < 0 && (len(g.Rules) > 0 || !isBuiltin(g.Name)) {
			t.Errorf("%s table: kube-proxy has chain %s (%d rules) the model does not build", tbl, g.Name, len(g.Rules))
		}
	}
	// The tail of nat KUBE-SERVICES must stay last.
	if i := indexOfChain(got, Services); tbl == NAT && i >= 0 {
		w := want.chains[NAT][indexOfChain(want.chains[NAT], Services)].Rules
		if g := got[i].Rules; len(g) > 0 && len(w) > 0 && g[len(g)-1] != w[len(w)-1] {
			t.Errorf("nat KUBE-SERVICES ends with %q, want %q", g[len(g)-1], w[len(w)-1])
		}
	}
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// createKubeProxyFixtures creates services and endpoint slices covering the
// model's cases.
func createKubeProxyFixtures(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	type fixture struct {
		svc *v1.Service
		lb  []string // status.loadBalancer.ingress IPs
		eps []discovery.Endpoint
	}
	svc := func(name, ip string, typ v1.ServiceType, ports []v1.ServicePort, change func(*v1.Service)) *v1.Service {
		s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: v1.ServiceSpec{Type: typ, ClusterIP: ip, Ports: ports}}
		if change != nil {
			change(s)
		}
		return s
	}
	tcp := func(name string, port, nodePort int32) []v1.ServicePort {
		return []v1.ServicePort{{Name: name, Protocol: v1.ProtocolTCP, Port: port, NodePort: nodePort, TargetPort: intstr.FromInt32(8080)}}
	}
	endpoint := func(ip string, onThisNode bool, change func(*discovery.Endpoint)) discovery.Endpoint {
		e := discovery.Endpoint{Addresses: []string{ip}, NodeName: ptr.To("node-b"),
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
		if onThisNode {
			e.NodeName = ptr.To(testkit.NodeName)
		}
		if change != nil {
			change(&e)
		}
		return e
	}
	draining := func(e *discovery.Endpoint) {
		e.Conditions.Ready, e.Conditions.Terminating = ptr.To(false), ptr.To(true)
	}
	hint := func(zone string) func(*discovery.Endpoint) {
		return func(e *discovery.Endpoint) {
			e.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: zone}}}
		}
	}
	etpLocal := func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }
	fixtures := []fixture{
		{svc: svc("web", "198.18.0.10", v1.ServiceTypeClusterIP, tcp("http", 80, 0), nil),
			eps: []discovery.Endpoint{endpoint("198.19.1.9", false, nil), endpoint("198.19.1.10", false, nil), endpoint("198.19.1.11", true, nil)}},
		{svc: svc("sticky", "198.18.0.11", v1.ServiceTypeNodePort, tcp("https", 443, 30443), func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
		}), eps: []discovery.Endpoint{endpoint("198.19.1.11", false, nil), endpoint("198.19.1.12", true, nil)}},
		{svc: svc("cache", "198.18.0.12", v1.ServiceTypeClusterIP,
			[]v1.ServicePort{{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(8080)}},
			func(s *v1.Service) { s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal) }),
			eps: []discovery.Endpoint{endpoint("198.19.1.11", false, nil), endpoint("198.19.1.12", true, nil)}},
		{svc: svc("ingress", "198.18.0.13", v1.ServiceTypeLoadBalancer, tcp("http", 80, 30080), func(s *v1.Service) {
			etpLocal(s)
			s.Spec.ExternalIPs = []string{"198.18.100.1"}
		}), lb: []string{"198.18.200.1"}, eps: []discovery.Endpoint{endpoint("198.19.1.11", false, nil)}},
		{svc: svc("api", "198.18.0.14", v1.ServiceTypeLoadBalancer, tcp("https", 443, 30444), func(s *v1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"198.19.0.0/24", "203.0.113.0/25"}
		}), lb: []string{"198.18.200.2"}, eps: []discovery.Endpoint{endpoint("198.19.1.11", false, nil), endpoint("198.19.1.12", false, nil)}},
		{svc: svc("empty", "198.18.0.15", v1.ServiceTypeNodePort, tcp("http", 80, 30081), nil)},
		{svc: svc("draining", "198.18.0.16", v1.ServiceTypeNodePort, tcp("http", 80, 30082), etpLocal),
			eps: []discovery.Endpoint{endpoint("198.19.1.11", false, draining), endpoint("198.19.1.12", true, draining)}},
		{svc: svc("signalling", "198.18.0.17", v1.ServiceTypeClusterIP,
			[]v1.ServicePort{{Protocol: v1.ProtocolSCTP, Port: 3868, TargetPort: intstr.FromInt32(8080)}}, nil),
			eps: []discovery.Endpoint{endpoint("198.19.1.13", false, nil)}},
		{svc: svc("zonal", "198.18.0.18", v1.ServiceTypeClusterIP, tcp("http", 80, 0), nil),
			eps: []discovery.Endpoint{endpoint("198.19.1.11", false, hint("zone-a")), endpoint("198.19.1.12", false, hint("zone-b"))}},
		// Externally accessible through its external IP only: with
		// AllowServiceExternalIPs off, kube-proxy still counts it so.
		{svc: svc("external-only", "198.18.0.19", v1.ServiceTypeClusterIP, tcp("http", 80, 0), func(s *v1.Service) {
			s.Spec.ExternalIPs = []string{"198.18.100.2"}
			s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		}), eps: []discovery.Endpoint{endpoint("198.19.1.11", false, nil), endpoint("198.19.1.12", true, nil)}},
	}

	for _, f := range fixtures {
		s, err := client.CoreV1().Services("default").Create(ctx, f.svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating service %s: %v", f.svc.Name, err)
		}
		if len(f.lb) > 0 {
			for _, ip := range f.lb {
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
			}
			if s, err = client.CoreV1().Services("default").UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("setting the load balancer of %s: %v", f.svc.Name, err)
			}
		}
		if len(f.eps) == 0 {
			continue
		}
		port := s.Spec.Ports[0]
		slice := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: s.Name + "-1",
				Labels: map[string]string{discovery.LabelServiceName: s.Name}},
			AddressType: discovery.AddressTypeIPv4,
			Endpoints:   f.eps,
			Ports:       []discovery.EndpointPort{{Name: ptr.To(port.Name), Protocol: ptr.To(port.Protocol), Port: ptr.To[int32](8080)}},
		}
		if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the endpoint slice of %s: %v", s.Name, err)
		}
	}
}
