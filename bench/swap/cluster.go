package swap

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kproxy.dev/kproxy/bench/lab"
)

// The services of the swap: web (Cluster policy, a NodePort) has a pod on
// every node; local (a LoadBalancer with externalTrafficPolicy: Local) has
// pods on the first nodes only, so the last node has none.
const (
	webVIP        = "198.18.0.10"
	webNodePort   = 30080
	localVIP      = "198.18.0.11"
	localNodePort = 30081
	localHCPort   = 30082
	servicePort   = 80
)

// Proxy names.
const (
	kubeProxy = "kube-proxy"
	kproxy    = "kproxy"
)

// Where both proxies serve, in each node's namespace (their defaults).
const (
	healthzURL = "http://127.0.0.1:10256/healthz"
	metricsURL = "http://127.0.0.1:10249/metrics"
)

// localNodes is how many nodes (the first ones) have a pod of local.
func localNodes(c *lab.Cluster) int { return len(c.Nodes) - 1 }

// hasLocal says whether node index i (0-based) has a pod of local.
func hasLocal(c *lab.Cluster, i int) bool { return i < localNodes(c) }

// createServices creates web and local with their EndpointSlices, as the
// endpoint-slice controller would for pods "web-i" (ready, on their node).
func createServices(ctx context.Context, t *testing.T, client kubernetes.Interface, c *lab.Cluster) {
	t.Helper()
	var webPods, localPods []*lab.Host
	for i, n := range c.Nodes {
		webPods = append(webPods, n.Pod("web"))
		if hasLocal(c, i) {
			localPods = append(localPods, n.Pod("web"))
		}
	}
	web := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, ClusterIP: webVIP,
			Ports: []v1.ServicePort{{Name: "http", Port: servicePort, Protocol: v1.ProtocolTCP,
				TargetPort: intstr.FromInt32(lab.NginxPort), NodePort: webNodePort}}},
	}
	local := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "local", Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ClusterIP: localVIP,
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: localHCPort,
			Ports: []v1.ServicePort{{Name: "http", Port: servicePort, Protocol: v1.ProtocolTCP,
				TargetPort: intstr.FromInt32(lab.NginxPort), NodePort: localNodePort}}},
	}
	for _, o := range []struct {
		svc  *v1.Service
		pods []*lab.Host
	}{{web, webPods}, {local, localPods}} {
		if _, err := client.CoreV1().Services(o.svc.Namespace).Create(ctx, o.svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating service %s: %v", o.svc.Name, err)
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: o.svc.Name + "-1", Namespace: o.svc.Namespace,
				Labels: map[string]string{discoveryv1.LabelServiceName: o.svc.Name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(lab.NginxPort)),
				Protocol: ptr.To(v1.ProtocolTCP)}},
		}
		for _, p := range o.pods {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{p.IPv4.String()},
				NodeName:  ptr.To(c.NodeOf(p).Name),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true),
					Terminating: ptr.To(false)},
				TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: o.svc.Namespace, Name: p.Name},
			})
		}
		if _, err := client.DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the endpoint slice of %s: %v", o.svc.Name, err)
		}
	}
}

// proxyOn is the proxy running on one node.
type proxyOn struct {
	node *lab.ClusterNode
	name string // kubeProxy or kproxy
	proc *lab.Process
}

// proxies starts and stops the proxies of the nodes.
type proxies struct {
	t *testing.T
	// kubeProxyBin and kproxyBin are the two proxies' binaries.
	kubeProxyBin, kproxyBin string
	kubeconfig              string
	on                      []*proxyOn
}

// args are the flags both proxies get: kube-proxy's iptables mode as a
// kubeadm DaemonSet runs it, conntrack sizing left to the host (the lab
// must not touch the host-wide nf_conntrack_max).
func (p *proxies) args(node string) []string {
	return []string{
		"--kubeconfig=" + p.kubeconfig,
		"--hostname-override=" + node,
		"--proxy-mode=iptables",
		"--cluster-cidr=" + lab.ClusterPodCIDR,
		"--conntrack-max-per-core=0",
		"--v=2",
	}
}

// start starts name on node i; it does not wait.
func (p *proxies) start(i int, name string) {
	p.t.Helper()
	n := p.on[i].node
	p.on[i].name = name
	bin := p.kubeProxyBin
	if name == kproxy {
		bin = p.kproxyBin
	}
	p.on[i].proc = n.StartFor(p.t, bin, p.args(n.Name)...)
}

// stop terminates node i's proxy as the kubelet does a pod's (SIGTERM),
// without --cleanup: its rules stay in the kernel.
func (p *proxies) stop(i int) {
	p.t.Helper()
	if err := p.on[i].proc.Stop(); err != nil {
		p.t.Fatalf("stopping %s: %v", p.on[i].proc, err)
	}
}

// waitReady waits until node i's proxy is what a DaemonSet rollout waits
// for and a little more: /healthz answers 200, it has synced its rules
// (the sync counter) and the health-check node port answers as it should.
func (p *proxies) waitReady(c *lab.Cluster, i int) time.Duration {
	p.t.Helper()
	start := time.Now()
	on := p.on[i]
	wantHC := 503
	if hasLocal(c, i) {
		wantHC = 200
	}
	lab.Within(p.t, 30*time.Second, fmt.Sprintf("%s on %s to be ready", on.name, on.node.Name), func() (bool, string) {
		select {
		case <-on.proc.Exited():
			p.t.Fatalf("%s exited: %v\n%s", on.proc, on.proc.Err(), on.proc.Log())
		default:
		}
		status, _, err := lab.HTTPGetStatus(on.node, healthzURL)
		if err != nil || status != 200 {
			return false, fmt.Sprintf("/healthz: %d %v", status, err)
		}
		syncs, err := syncCount(on.node.Host)
		if err != nil || syncs < 1 {
			return false, fmt.Sprintf("syncs: %d %v", syncs, err)
		}
		hc, _, err := lab.HTTPGetStatus(c.LB, fmt.Sprintf("http://%s:%d/", on.node.IPv4, localHCPort))
		return err == nil && hc == wantHC, fmt.Sprintf("health-check node port: %d %v, want %d", hc, err, wantHC)
	})
	return time.Since(start)
}

// syncCount reads the proxy's count of rule syncs from its metrics on h.
func syncCount(h *lab.Host) (int, error) {
	status, body, err := lab.HTTPGetStatus(h, metricsURL)
	if err != nil || status != 200 {
		return 0, fmt.Errorf("GET %s: %d %v", metricsURL, status, err)
	}
	// kube-proxy 1.36 labels it by IP family; sum the families.
	total, found := 0, false
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, lab.SyncCountMetric)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(rest)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", metricsURL, line, err)
		}
		total, found = total+int(n), true
	}
	if found {
		return total, nil
	}
	return 0, fmt.Errorf("no %s in %s", lab.SyncCountMetric, metricsURL)
}

// setTerminating marks pod's endpoint of web terminating (still serving, as
// during a graceful shutdown) or ready again, as the endpoint-slice
// controller does.
func setTerminating(ctx context.Context, client kubernetes.Interface, pod *lab.Host, terminating bool) error {
	slices := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
	slice, err := slices.Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading web's endpoint slice: %w", err)
	}
	found := false
	for i, ep := range slice.Endpoints {
		if ep.TargetRef != nil && ep.TargetRef.Name == pod.Name {
			slice.Endpoints[i].Conditions = discoveryv1.EndpointConditions{
				Ready: ptr.To(!terminating), Serving: ptr.To(true), Terminating: ptr.To(terminating)}
			found = true
		}
	}
	if !found {
		return fmt.Errorf("no endpoint of %s in web's endpoint slice", pod.Name)
	}
	if _, err := slices.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating web's endpoint slice: %w", err)
	}
	return nil
}
