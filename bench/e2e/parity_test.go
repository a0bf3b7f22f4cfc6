package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kproxy.dev/kproxy/bench/lab"
)

// Parity cases: kube-proxy v1.36.3 and kproxy run on the same input (one
// lab each, the same API objects, the same flags), and the same checks must
// pass for both.

const (
	parityLBPort      = 30081
	parityHealthCheck = 30256
)

// proxyUnderTest is one of the two proxies a parity case runs.
type proxyUnderTest struct {
	name string
	// start runs the proxy on l's node against api with the common flags
	// and args, and returns once it is running (not necessarily synced).
	start func(t *testing.T, l *e2eLab, api *lab.APIServer, args ...string) *lab.Process
}

func parityProxies() []proxyUnderTest {
	return []proxyUnderTest{
		{name: "kube-proxy", start: func(t *testing.T, l *e2eLab, api *lab.APIServer, args ...string) *lab.Process {
			flags := append([]string{"--kubeconfig=" + api.KubeconfigPath, "--hostname-override=node",
				"--proxy-mode=" + l.mode.name, "--conntrack-max-per-core=0", "--iptables-min-sync-period=0", "-v=2"}, args...)
			return l.topo.Node.StartFor(t, lab.KubeProxyBinary(t), flags...)
		}},
		{name: "kproxy", start: func(t *testing.T, l *e2eLab, api *lab.APIServer, args ...string) *lab.Process {
			l.runKproxyOn(t, "--kubeconfig="+api.KubeconfigPath, nil, args...)
			return l.kproxy
		}},
	}
}

// forParity runs body once per kernel proxy mode kube-proxy has on this
// host (iptables, nftables; or those of modes) and per proxy, each in a lab
// of its own with a fresh API server.
func forParity(t *testing.T, body func(t *testing.T, l *e2eLab, api *lab.APIServer, p proxyUnderTest), modes ...string) {
	t.Helper()
	if len(modes) == 0 {
		modes = []string{"iptables", "nftables"}
	}
	forModes(t, func(m proxyMode) bool { return slices.Contains(modes, m.name) }, func(t *testing.T, m proxyMode) {
		for _, p := range parityProxies() {
			t.Run(p.name, func(t *testing.T) {
				l := newLab(t, m, nil)
				if l == nil {
					return
				}
				body(t, l, lab.StartAPIServer(t), p)
			})
		}
	})
}

// createNodeWithAddresses creates the Node "node" with addrs in this order
// (kube-proxy prefers InternalIPs to ExternalIPs whatever the order).
func createNodeWithAddresses(t *testing.T, client kubernetes.Interface, addrs ...v1.NodeAddress) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "node", Labels: map[string]string{v1.LabelHostname: "node"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the Node: %v", err)
	}
	node.Status.Addresses = addrs
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the Node's addresses: %v", err)
	}
}

// createParityServices creates "web", a NodePort service (webNodePort) over
// the backends, and "lb", an externalTrafficPolicy=Local LoadBalancer with
// a health-check node port and its endpoints on this node.
func createParityServices(t *testing.T, client kubernetes.Interface, backends []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	web := apiService("web", webVIP, "http", 80, 8080, v1.ProtocolTCP)
	web.Spec.Type = v1.ServiceTypeNodePort
	web.Spec.Ports[0].NodePort = webNodePort
	lb := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb", Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort: parityHealthCheck,
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080),
				NodePort: parityLBPort}}},
	}
	lbSlice := apiSlice("lb", "http", 8080, v1.ProtocolTCP, backends)
	for i := range lbSlice.Endpoints {
		lbSlice.Endpoints[i].NodeName = ptr.To("node")
	}
	for _, svc := range []*v1.Service{web, lb} {
		if _, err := client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating service %s: %v", svc.Name, err)
		}
	}
	for _, s := range []*discoveryv1.EndpointSlice{apiSlice("web", "http", 8080, v1.ProtocolTCP, backends), lbSlice} {
		if _, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating EndpointSlice %s: %v", s.Name, err)
		}
	}
}

// TestParityNodePortAddressesPrimary: with --nodeport-addresses=primary,
// NodePorts and health-check node ports answer on the node's primary IP as
// the Node object gives it (its InternalIP, although an ExternalIP is
// listed first), and not on the node's other address, for kube-proxy and
// kproxy alike.
func TestParityNodePortAddressesPrimary(t *testing.T) {
	forParity(t, func(t *testing.T, l *e2eLab, api *lab.APIServer, p proxyUnderTest) {
		other := l.topo.Node.PodIPv4.String()
		createNodeWithAddresses(t, api.Client,
			v1.NodeAddress{Type: v1.NodeExternalIP, Address: other},
			v1.NodeAddress{Type: v1.NodeInternalIP, Address: nodeIP},
			v1.NodeAddress{Type: v1.NodeHostName, Address: "node"})
		createParityServices(t, api.Client, l.backends)
		proc := p.start(t, l, api, "--nodeport-addresses=primary")

		client := l.topo.Client
		primary := fmt.Sprintf("http://%s:%d/", nodeIP, webNodePort)
		lab.Eventually(t, p.name+" to serve the NodePort on the primary IP", func() (bool, string) {
			select {
			case <-proc.Exited():
				t.Fatalf("%s exited: %v\n%s", p.name, proc.Err(), proc.Log())
			default:
			}
			answer, err := askHTTP(client, primary)()
			return err == nil, fmt.Sprint(answer, err)
		})
		l.wantBalanced(t, primary+" (the Node's InternalIP)", askHTTP(client, primary))
		notPrimary := fmt.Sprintf("http://%s:%d/", other, webNodePort)
		answer, err := askHTTP(client, notPrimary)()
		wantRefused(t, notPrimary+" (the Node's ExternalIP, not its primary IP)", answer, err)

		hc := fmt.Sprintf("http://%s:%d/", nodeIP, parityHealthCheck)
		lab.Eventually(t, "the health-check node port on the primary IP", func() (bool, string) {
			status, body, err := lab.HTTPGetStatus(client, hc)
			return err == nil && status == 200, fmt.Sprint(status, body, err)
		})
		hcOther := fmt.Sprintf("http://%s:%d/", other, parityHealthCheck)
		status, body, err := lab.HTTPGetStatus(client, hcOther)
		if err == nil {
			t.Errorf("the health-check node port answered on %s (not the primary IP): %d %q", hcOther, status, body)
		}
	})
}

// TestParityInitOnly: --init-only sets the sysctls the proxy needs (the
// conntrack timeouts, route_localnet for localhost NodePorts), writes no
// rule and exits 0, for kube-proxy and kproxy alike.
func TestParityInitOnly(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.name == "iptables" }, func(t *testing.T, m proxyMode) {
		for _, p := range []string{"kube-proxy", "kproxy"} {
			t.Run(p, func(t *testing.T) {
				l := newLab(t, m, nil)
				if l == nil {
					return
				}
				api := lab.StartAPIServer(t)
				lab.CreateNode(t, api.Client, "node", nodeIP)
				sysctls := map[string]struct{ before, after string }{
					"net/ipv4/conf/all/route_localnet":                   {"0", "1"},
					"net/netfilter/nf_conntrack_tcp_timeout_established": {"600", "86400"},
					"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  {"60", "3600"},
				}
				for name, v := range sysctls {
					writeProcSys(t, name, v.before)
				}
				bin := l.bin
				if p == "kube-proxy" {
					bin = lab.KubeProxyBinary(t)
				}
				proc := l.topo.Node.StartFor(t, bin, "--init-only", "--kubeconfig="+api.KubeconfigPath,
					"--hostname-override=node", "--proxy-mode=iptables", "--conntrack-max-per-core=0", "-v=2")
				select {
				case <-proc.Exited():
				case <-time.After(time.Minute):
					t.Fatalf("%s --init-only still runs after a minute:\n%s", p, proc.Log())
				}
				if code := proc.ExitCode(); code != 0 {
					t.Fatalf("%s --init-only exited %d:\n%s", p, code, proc.Log())
				}
				for name, v := range sysctls {
					if got := readProcSys(t, name); got != v.after {
						t.Errorf("%s after %s --init-only = %s, want %s", name, p, got, v.after)
					}
				}
				if save := lab.Run(t, "iptables-save"); strings.Contains(save, "KUBE-") {
					t.Errorf("%s --init-only wrote rules:\n%s", p, save)
				}
			})
		}
	})
}

func readProcSys(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeProcSys(t *testing.T, name, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gateRun is one run of a proxy that only checks its settings
// (--write-config-to): whether it refused them and what it printed.
type gateRun struct {
	refused bool
	output  string
}

func runGates(t *testing.T, bin string, args ...string) gateRun {
	t.Helper()
	out := filepath.Join(t.TempDir(), "written.yaml")
	output, err := exec.Command(bin, append(args, "--write-config-to="+out)...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return gateRun{output: string(output)}
	case errors.As(err, &exit):
		return gateRun{refused: true, output: string(output)}
	}
	t.Fatalf("running %s: %v", bin, err)
	return gateRun{}
}

// helpGates lists the gates a proxy's --help shows under --feature-gates.
func helpGates(t *testing.T, bin string) []string {
	t.Helper()
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	re := regexp.MustCompile(`(?m)^\s+([A-Za-z0-9]+=true\|false \([A-Z]+ - default=(true|false)\))\s*$`)
	var gates []string
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		gates = append(gates, m[1])
	}
	if len(gates) == 0 {
		t.Fatalf("%s --help lists no feature gate:\n%s", bin, out)
	}
	return gates
}

// TestParityFeatureGates: kube-proxy v1.36.3 and kproxy know the same
// feature gates (their --help lists are the same, and every gate either
// lists, set to its default, is accepted by both), and refuse or accept the
// same settings, from flags and from featureGates in a --config file, with
// the same words.
func TestParityFeatureGates(t *testing.T) {
	kubeProxy, kproxy := lab.KubeProxyBinary(t), lab.KproxyBinary(t)
	kpGates, kGates := helpGates(t, kubeProxy), helpGates(t, kproxy)
	if diff := cmp.Diff(kpGates, kGates); diff != "" {
		t.Errorf("feature gates in --help (-kube-proxy +kproxy):\n%s", diff)
	}
	var atDefault []string
	for _, g := range kpGates {
		name, rest, _ := strings.Cut(g, "=")
		atDefault = append(atDefault, name+"="+strings.TrimSuffix(rest[strings.LastIndex(rest, "=")+1:], ")"))
	}
	config := filepath.Join(t.TempDir(), "config.yaml")
	const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	for _, tc := range []struct {
		name    string
		file    string // a --config file's featureGates section, or none
		flag    string // a --feature-gates value, or none
		refused bool
		mention string
	}{
		{name: "unknown gate (flag)", flag: "Bogus=true", refused: true, mention: "unrecognized feature gate: Bogus"},
		{name: "unknown gate (file)", file: "featureGates:\n  Bogus: true\n", refused: true, mention: "unrecognized feature gate: Bogus"},
		{name: "locked gate set to its other value", flag: "MultiCIDRServiceAllocator=false", refused: true,
			mention: "cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true"},
		{name: "locked gate set to its value", flag: "NFTablesProxyMode=true"},
		{name: "GA gate set off", flag: "AllowServiceExternalIPs=false", mention: "AllowServiceExternalIPs"},
		{name: "GA gate set off (file)", file: "featureGates:\n  AllowServiceExternalIPs: false\n", mention: "AllowServiceExternalIPs"},
		{name: "every listed gate at its default", flag: strings.Join(atDefault, ",")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.file != "" {
				if err := os.WriteFile(config, []byte(header+tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config="+config)
			}
			if tc.flag != "" {
				args = append(args, "--feature-gates="+tc.flag)
			}
			kp, k := runGates(t, kubeProxy, args...), runGates(t, kproxy, args...)
			if kp.refused != tc.refused {
				t.Fatalf("kube-proxy refused=%t, the test expects %t:\n%s", kp.refused, tc.refused, kp.output)
			}
			if k.refused != kp.refused {
				t.Fatalf("kproxy refused=%t, kube-proxy refused=%t\nkproxy:\n%s\nkube-proxy:\n%s", k.refused, kp.refused, k.output, kp.output)
			}
			for name, out := range map[string]string{"kube-proxy": kp.output, "kproxy": k.output} {
				if !strings.Contains(out, tc.mention) {
					t.Errorf("%s's output does not mention %q:\n%s", name, tc.mention, out)
				}
			}
		})
	}
}

// TestParityAllowServiceExternalIPsOff: with the AllowServiceExternalIPs
// gate off, a service's externalIPs are not programmed (its ClusterIP and
// NodePort are), for kube-proxy and kproxy alike.
func TestParityAllowServiceExternalIPsOff(t *testing.T) {
	forParity(t, func(t *testing.T, l *e2eLab, api *lab.APIServer, p proxyUnderTest) {
		lab.CreateNode(t, api.Client, "node", nodeIP)
		createParityServices(t, api.Client, l.backends)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		web, err := api.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		web.Spec.ExternalIPs = []string{externalIP}
		if _, err := api.Client.CoreV1().Services(metav1.NamespaceDefault).Update(ctx, web, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		proc := p.start(t, l, api, "--feature-gates=AllowServiceExternalIPs=false")
		client := l.topo.Client
		nodePort := fmt.Sprintf("http://%s:%d/", nodeIP, webNodePort)
		lab.Eventually(t, p.name+" to serve the NodePort", func() (bool, string) {
			select {
			case <-proc.Exited():
				t.Fatalf("%s exited: %v\n%s", p.name, proc.Err(), proc.Log())
			default:
			}
			answer, err := askHTTP(client, nodePort)()
			return err == nil, fmt.Sprint(answer, err)
		})
		l.wantBalanced(t, "the ClusterIP", askHTTP(client, "http://"+webVIP+"/"))
		if answer, err := askHTTP(client, "http://"+externalIP+"/")(); err == nil {
			t.Errorf("the external IP %s answered (%q) with AllowServiceExternalIPs=false", externalIP, answer)
		}
		if p.name == "kproxy" {
			if state := l.programmedState(t); mentionsAddress(state, externalIP) {
				t.Errorf("kproxy programmed the external IP %s:\n%s", externalIP, state)
			}
		}
	})
}

// TestParityHealthzDeletionTaint: /healthz answers 503 with nodeEligible
// false while the Node has the cluster autoscaler's
// ToBeDeletedByClusterAutoscaler taint, and 200 again once it is gone, for
// kube-proxy and kproxy alike (/livez stays 200).
func TestParityHealthzDeletionTaint(t *testing.T) {
	forParity(t, func(t *testing.T, l *e2eLab, api *lab.APIServer, p proxyUnderTest) {
		lab.CreateNode(t, api.Client, "node", nodeIP)
		createParityServices(t, api.Client, l.backends)
		p.start(t, l, api)
		client := &http.Client{Timeout: 2 * time.Second}
		probe := func(path string) (int, string) {
			resp, err := client.Get("http://127.0.0.1:10256" + path)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		setTaint := func(on bool) {
			t.Helper()
			node, err := api.Client.CoreV1().Nodes().Get(ctx, "node", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			node.Spec.Taints = nil
			if on {
				node.Spec.Taints = []v1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: v1.TaintEffectNoSchedule}}
			}
			if _, err := api.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, st := range []struct {
			what     string
			taint    bool
			code     int
			eligible string
		}{
			{"before the taint", false, http.StatusOK, `"nodeEligible":true`},
			{"with the taint", true, http.StatusServiceUnavailable, `"nodeEligible":false`},
			{"after the taint", false, http.StatusOK, `"nodeEligible":true`},
		} {
			if st.taint || st.what == "after the taint" {
				setTaint(st.taint)
			}
			lab.Eventually(t, p.name+"'s /healthz "+st.what, func() (bool, string) {
				code, body := probe("/healthz")
				return code == st.code && strings.Contains(body, st.eligible), fmt.Sprint(code, " ", body)
			})
			if code, body := probe("/livez"); code != http.StatusOK {
				t.Errorf("%s's /livez %s: %d %s, want 200", p.name, st.what, code, body)
			}
		}
	}, "iptables") // the taint is mode-independent: one mode stands for all
}

// TestParityNodeEvents: at start, the proxy records kube-proxy's birth cry
// on its Node through the events.k8s.io/v1 API of the real kube-apiserver:
// reason Starting, action StartKubeProxy, reported by kube-proxy; kube-proxy
// v1.36.3 and kproxy record the same event.
func TestParityNodeEvents(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	forParity(t, func(t *testing.T, l *e2eLab, api *lab.APIServer, p proxyUnderTest) {
		lab.CreateNode(t, api.Client, "node", nodeIP)
		p.start(t, l, api)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var got []string
		lab.Eventually(t, p.name+"'s Starting event on the Node", func() (bool, string) {
			list, err := api.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			got = got[:0]
			for _, e := range list.Items {
				if e.Regarding.Kind == "Node" && e.Reason == "Starting" {
					got = append(got, fmt.Sprintf("namespace=%s regarding=%s/%s/%s type=%s action=%s controller=%s instance=%s note=%q",
						e.Namespace, e.Regarding.APIVersion, e.Regarding.Kind, e.Regarding.Name, e.Type, e.Action,
						e.ReportingController, e.ReportingInstance, e.Note))
				}
			}
			return len(got) > 0, fmt.Sprint(got)
		})
		want := []string{fmt.Sprintf("namespace=default regarding=v1/Node/node type=Normal action=StartKubeProxy controller=kube-proxy instance=kube-proxy-%s note=\"\"", host)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s's Starting events (-want +got):\n%s", p.name, diff)
		}
	}, "iptables") // the event is mode-independent
}

// TestParityLocalDetectors: the local-traffic detectors decide which
// cluster IP traffic is masqueraded: traffic from outside the pods (the
// client, routed through the node) is, traffic from a pod is not. Each
// detector, and none as the control (nothing is masqueraded), gives the
// same sources at the endpoints with kube-proxy and kproxy.
func TestParityLocalDetectors(t *testing.T) {
	const detVIP = "198.18.0.30"
	for _, tc := range []struct {
		name     string
		flags    []string
		podCIDRs []string
		// masqueraded: the client's traffic reaches the endpoint from the
		// node's pod-side address, not from the client's.
		masqueraded bool
	}{
		{name: "none", masqueraded: false},
		{name: "NodeCIDR", flags: []string{"--detect-local-mode=NodeCIDR"}, podCIDRs: []string{"198.19.1.0/24"}, masqueraded: true},
		{name: "BridgeInterface", flags: []string{"--detect-local-mode=BridgeInterface", "--pod-bridge-interface=br-pods"}, masqueraded: true},
		{name: "InterfaceNamePrefix", flags: []string{"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=br-"}, masqueraded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forParity(t, func(t *testing.T, l *e2eLab, api *lab.APIServer, p proxyUnderTest) {
				node := lab.CreateNode(t, api.Client, "node", nodeIP)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if len(tc.podCIDRs) > 0 {
					node.Spec.PodCIDR, node.Spec.PodCIDRs = tc.podCIDRs[0], tc.podCIDRs
					if _, err := api.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				// Endpoints on backend-2 and -3 only: backend-1 asks, and
				// is never its own endpoint (hairpins are masqueraded).
				if _, err := api.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx,
					apiService("det", detVIP, "http", 80, 8080, v1.ProtocolTCP), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if _, err := api.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx,
					apiSlice("det", "http", 8080, v1.ProtocolTCP, l.backends[1:]), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				proc := p.start(t, l, api, tc.flags...)
				ask := func(from lab.Dialer) func() (string, error) { return askSource(from, "http://"+detVIP) }
				lab.Eventually(t, p.name+" to serve the cluster IP", func() (bool, string) {
					select {
					case <-proc.Exited():
						t.Fatalf("%s exited: %v\n%s", p.name, proc.Err(), proc.Log())
					default:
					}
					answer, err := ask(l.topo.Client)()
					return err == nil, fmt.Sprint(answer, err)
				})
				wantSource := func(what string, from lab.Dialer, source string) {
					t.Helper()
					for answer := range lab.Spread(t, 4, ask(from)) {
						if _, got, _ := strings.Cut(answer, " "); got != source {
							t.Errorf("%s with %s: an endpoint saw %s, want %s", what, p.name, got, source)
						}
					}
				}
				clientSource := clientIP
				if tc.masqueraded {
					clientSource = l.topo.Node.PodIPv4.String()
				}
				wantSource("the client (not a pod)", l.topo.Client, clientSource)
				wantSource("a pod", l.topo.Backends[0], l.backends[0])
			})
		})
	}
}
