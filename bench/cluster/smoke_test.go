package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"kproxy.dev/kproxy/bench/cluster"
)

const (
	smokeNamespace = "kproxy-smoke"
	// requests per path: with two backends picked at random (the iptables
	// mode), all answered by one is a 1-in-500-million chance; at 12 it
	// was 1 in 2,000 per path, a flaky check.
	smokeRequests = 30
)

// TestSmoke checks the cluster make cluster brought up, with kproxy as its
// proxy: a Deployment of HTTP servers, one per node, behind a ClusterIP and a
// NodePort Service, is reached from a pod on the first node and from the
// second node's own network, and more than one backend answers each way.
func TestSmoke(t *testing.T) {
	if os.Getenv("KPROXY_CLUSTER") == "" {
		t.Skip("KPROXY_CLUSTER is not set: run make cluster, then make cluster-smoke")
	}
	dir := os.Getenv("KPROXY_CLUSTER_DIR")
	if dir == "" {
		dir = cluster.DefaultStateDir
	}
	client, err := cluster.AdminClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkSmoke(t, client)
}

// checkSmoke is TestSmoke's check on the cluster client reaches.
func checkSmoke(t *testing.T, client kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	askSmoke(ctx, t, client, setUpSmoke(ctx, t, client))
}

// smokeTarget is what setUpSmoke made for askSmoke: the backends' names
// and the two Services.
type smokeTarget struct {
	backends  []string
	clusterIP string
	nodePort  string
}

// setUpSmoke runs one podweb server per node behind a ClusterIP and a
// NodePort Service, in a namespace removed when the test ends.
func setUpSmoke(ctx context.Context, t *testing.T, client kubernetes.Interface) smokeTarget {
	t.Helper()
	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	if len(nodeList.Items) < 2 {
		t.Fatalf("the cluster has %d nodes, the smoke check needs 2 or more", len(nodeList.Items))
	}
	freshNamespace(ctx, t, client)
	replicas := int32(len(nodeList.Items))
	backends := deployWeb(ctx, t, client, replicas)
	clusterIP := createService(ctx, t, client, "web", v1.ServiceTypeClusterIP)
	nodePortSvc := createService(ctx, t, client, "web-nodeport", v1.ServiceTypeNodePort)
	for _, svc := range []string{"web", "web-nodeport"} {
		waitEndpoints(ctx, t, client, svc, int(replicas))
	}
	return smokeTarget{backends: backends, clusterIP: clusterIP.Spec.ClusterIP,
		nodePort: strconv.Itoa(int(nodePortSvc.Spec.Ports[0].NodePort))}
}

// askSmoke reaches the ClusterIP and the NodePort from a pod on the first
// node and from the second node's own network: every answer must come from
// a backend, and more than one backend must answer each way.
func askSmoke(ctx context.Context, t *testing.T, client kubernetes.Interface, target smokeTarget) {
	t.Helper()
	first, second := cluster.NodeAt(1), cluster.NodeAt(2)
	url := func(ip, port string) string { return "http://" + net.JoinHostPort(ip, port) + "/" }
	fromPod := map[string]string{
		"ClusterIP":                   url(target.clusterIP, "80"),
		"NodePort on the second node": url(second.IP.String(), target.nodePort),
	}
	podAnswers := askFromPod(ctx, t, client, first.Name, fromPod)
	for _, tc := range []struct {
		name    string
		answers func() []string
	}{
		{"pod on " + first.Name + " to the ClusterIP", func() []string { return podAnswers[fromPod["ClusterIP"]] }},
		{"pod on " + first.Name + " to the NodePort of " + second.Name, func() []string { return podAnswers[fromPod["NodePort on the second node"]] }},
		{second.Name + " to the ClusterIP", func() []string { return askFromNode(ctx, t, second, url(target.clusterIP, "80")) }},
		{second.Name + " to the NodePort of " + first.Name, func() []string { return askFromNode(ctx, t, second, url(first.IP.String(), target.nodePort)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answers := tc.answers()
			if len(answers) != smokeRequests {
				t.Fatalf("%d answers, want %d: %v", len(answers), smokeRequests, answers)
			}
			seen := map[string]bool{}
			for _, a := range answers {
				if !slices.Contains(target.backends, a) {
					t.Errorf("answer %q is from no backend of %v", a, target.backends)
				}
				seen[a] = true
			}
			if len(seen) < 2 {
				t.Errorf("only %v answered %d requests; backends %v", seen, smokeRequests, target.backends)
			}
			t.Logf("%d answers from %d backends", len(answers), len(seen))
		})
	}
}

// freshNamespace makes the smoke check's namespace anew (a previous run's
// goes first) and removes it when the test ends.
func freshNamespace(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	nss := client.CoreV1().Namespaces()
	if err := nss.Delete(ctx, smokeNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting the namespace of a previous run: %v", err)
	}
	poll(ctx, t, "the previous namespace gone", func() error {
		_, err := nss.Get(ctx, smokeNamespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	if _, err := nss.Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: smokeNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = nss.Delete(context.Background(), smokeNamespace, metav1.DeleteOptions{})
	})
	// Pods are refused until the controller manager made the default
	// service account.
	poll(ctx, t, "the default service account", func() error {
		_, err := client.CoreV1().ServiceAccounts(smokeNamespace).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func webLabels() map[string]string { return map[string]string{"app": "web"} }

// deployWeb runs replicas podweb servers, one per node, and returns their
// pod names (what they answer).
func deployWeb(ctx context.Context, t *testing.T, client kubernetes.Interface, replicas int32) []string {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: webLabels()},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: webLabels()},
				Spec: v1.PodSpec{
					TopologySpreadConstraints: []v1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: v1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: webLabels()},
					}},
					Containers: []v1.Container{{
						Name: "web", Image: cluster.PodwebImage, ImagePullPolicy: v1.PullNever,
						Command: []string{"/podweb", "serve", ":8080"},
						Ports:   []v1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{
							HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1},
					}},
				},
			},
		},
	}
	if _, err := client.AppsV1().Deployments(smokeNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Deployment: %v", err)
	}
	var names []string
	poll(ctx, t, "the web pods ready, one per node", func() error {
		pods, err := client.CoreV1().Pods(smokeNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		names = nil
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			if podReady(&p) {
				names = append(names, p.Name)
				nodes[p.Spec.NodeName] = true
			}
		}
		if len(names) != int(replicas) || len(nodes) != int(replicas) {
			return fmt.Errorf("%d ready on %d nodes, want %d", len(names), len(nodes), replicas)
		}
		return nil
	})
	return names
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

func createService(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, typ v1.ServiceType) *v1.Service {
	t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ServiceSpec{
			Type:     typ,
			Selector: webLabels(),
			Ports:    []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}},
		},
	}
	got, err := client.CoreV1().Services(smokeNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service %s: %v", name, err)
	}
	return got
}

// waitEndpoints waits for the Service's EndpointSlices to list n ready
// endpoints.
func waitEndpoints(ctx context.Context, t *testing.T, client kubernetes.Interface, svc string, n int) {
	t.Helper()
	poll(ctx, t, "endpoints of "+svc, func() error {
		slices, err := client.DiscoveryV1().EndpointSlices(smokeNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return err
		}
		ready := 0
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready++
				}
			}
		}
		if ready != n {
			return fmt.Errorf("%d ready endpoints, want %d", ready, n)
		}
		return nil
	})
}

// askFromPod runs a podweb client pod on node, asking each URL
// smokeRequests times, and returns the answers by URL.
func askFromPod(ctx context.Context, t *testing.T, client kubernetes.Interface, node string, urls map[string]string) map[string][]string {
	t.Helper()
	args := []string{"/podweb", "get", "-n", strconv.Itoa(smokeRequests), "-wait", "30s"}
	for _, u := range urls {
		args = append(args, u)
	}
	pod := &v1.Pod{
		// A name of its own per call: askSmoke runs once per mode.
		ObjectMeta: metav1.ObjectMeta{GenerateName: "client-"},
		Spec: v1.PodSpec{
			NodeName:      node,
			RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{
				Name: "client", Image: cluster.PodwebImage, ImagePullPolicy: v1.PullNever, Command: args,
			}},
		},
	}
	pods := client.CoreV1().Pods(smokeNamespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the client pod: %v", err)
	}
	var phase v1.PodPhase
	poll(ctx, t, "the client pod done", func() error {
		p, err := pods.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		phase = p.Status.Phase
		if phase != v1.PodSucceeded && phase != v1.PodFailed {
			return fmt.Errorf("phase %s", phase)
		}
		return nil
	})
	logs, err := pods.GetLogs(created.Name, &v1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the client pod's log: %v", err)
	}
	if phase != v1.PodSucceeded {
		t.Errorf("the client pod %s; its log:\n%s", phase, logs)
	}
	answers := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(logs)), "\n") {
		url, answer, _ := strings.Cut(line, " ")
		answers[url] = append(answers[url], answer)
	}
	return answers
}

// askFromNode asks url smokeRequests times from the node's own network
// namespace (as a process on the node would), each on a new connection.
func askFromNode(ctx context.Context, t *testing.T, node cluster.Node, url string) []string {
	t.Helper()
	httpc := nodeHTTPClient(node)
	get := func() (string, error) { return getFromNode(ctx, httpc, url) }
	poll(ctx, t, url+" answering from "+node.Name, func() error { _, err := get(); return err })
	var answers []string
	for range smokeRequests {
		a, err := get()
		if err != nil {
			t.Errorf("GET %s from %s: %v", url, node.Name, err)
			continue
		}
		answers = append(answers, a)
	}
	return answers
}

// nodeHTTPClient dials from the node's own network namespace, a new
// connection per request.
func nodeHTTPClient(node cluster.Node) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return cluster.DialIn(ctx, cluster.NetnsPath(node.Netns), network, addr)
		},
	}}
}

// getFromNode GETs url with a nodeHTTPClient, returning the body without
// surrounding white space; a status other than 200 is an error.
func getFromNode(ctx context.Context, httpc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s: %s", resp.Status, body)
	}
	return strings.TrimSpace(string(body)), nil
}

// poll retries check every 250 ms until it succeeds, failing the test when
// ctx ends.
func poll(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
