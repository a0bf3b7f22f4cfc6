package deploy

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"kproxy.dev/kproxy/bench/lab"
)

// The paths the DaemonSet's pod sees: the kubelet mounts the
// ServiceAccount's token and CA at saDir and the ConfigMap at configDir.
const (
	saDir     = "/var/run/secrets/kubernetes.io/serviceaccount"
	configDir = "/var/lib/kube-proxy"
)

// TestKproxyBootstrapsFromTheConfigMap runs kproxy as the DaemonSet of
// deploy/base/kproxy.yaml would, against a real kube-apiserver authorizing by
// RBAC: its command and flags, its ConfigMap's config.conf and
// kubeconfig.conf at their mount paths (moved under a temporary
// directory), its api-server set to the API server as an operator sets it, a token of the manifest's ServiceAccount and no permission but
// the manifest's binding to system:node-proxier. kproxy must answer the
// readiness probe and program a Service it can only have learnt from the
// API server, without a request refused.
func TestKproxyBootstrapsFromTheConfigMap(t *testing.T) {
	bin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
		return
	}
	api := lab.StartAPIServer(t, lab.WithPrivilegedContainers(), lab.WithRBAC())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	objs := parseFile(t, manifestPath)
	a, err := newApplier(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount and ConfigMap for real (no kubelet would run the
	// DaemonSet); the binding once the token is shown to need it.
	if err := a.apply(ctx, []*unstructured.Unstructured{only(t, objs, "ServiceAccount"), only(t, objs, "ConfigMap")}, false); err != nil {
		t.Fatal(err)
	}
	sa := only(t, objs, "ServiceAccount")
	tok, err := api.Client.CoreV1().ServiceAccounts(sa.GetNamespace()).CreateToken(ctx, sa.GetName(),
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s: %v", sa.GetName(), err)
	}

	root := t.TempDir()
	mounts := func(p string) string { return filepath.Join(root, p) }
	write(t, mounts(saDir+"/token"), tok.Status.Token)
	write(t, mounts(saDir+"/ca.crt"), string(api.Config.CAData))
	kubeconfig := replaceAll(t, configMapData(t, objs, KubeconfigKey), KubeconfigKey, saDir+"/", mounts(saDir)+"/")
	write(t, mounts(configDir+"/"+KubeconfigKey), kubeconfig)
	write(t, mounts(configDir+"/"+ConfigKey),
		replaceAll(t, configMapData(t, objs, ConfigKey), ConfigKey, configDir+"/", mounts(configDir)+"/"))

	// Authenticated as the ServiceAccount, not anonymously (which the lab's
	// AlwaysAllow authorizer would let through as well).
	restCfg, err := clientcmd.BuildConfigFromFlags(api.URL, mounts(configDir+"/"+KubeconfigKey))
	if err != nil {
		t.Fatalf("loading the ConfigMap's kubeconfig: %v", err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("asking the API server who the ConfigMap's kubeconfig is: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:"+sa.GetNamespace()+":"+sa.GetName(); got != want {
		t.Errorf("the ConfigMap's kubeconfig authenticates as %q, want %q", got, want)
	}
	_, err = client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing EndpointSlices before the ClusterRoleBinding: got %v, want forbidden (is RBAC on?)", err)
	}
	if err := a.apply(ctx, []*unstructured.Unstructured{only(t, objs, "ClusterRoleBinding")}, false); err != nil {
		t.Fatal(err)
	}

	const node, clusterIP = "node-1", "198.18.7.7"
	lab.CreateNode(t, api.Client, node, "198.19.0.10")
	if _, err := api.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{ClusterIP: clusterIP, Ports: []v1.ServicePort{{
			Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"198.19.0.20"}, NodeName: ptr.To("node-2"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ds := only(t, objs, "DaemonSet")
	// The operator's value, set as an overlay sets it.
	configMap := map[string]string{APIServerKey: api.URL}
	args, probe := containerArgs(t, ds, configMap, node, func(s string) string {
		return strings.ReplaceAll(s, configDir+"/", mounts(configDir)+"/")
	})
	logPath := filepath.Join(root, "kproxy.log")
	stop := start(t, bin, args, logPath)
	defer stop()

	lab.Eventually(t, "kproxy, started as the DaemonSet starts it, to be ready and to program the Service", func() (bool, string) {
		status, err := get(probe)
		if err != nil || status != http.StatusOK {
			return false, fmt.Sprintf("readiness probe %s: %d %v\n%s", probe, status, err, tailFile(logPath))
		}
		rules := natRules()
		if !strings.Contains(rules, clusterIP) {
			return false, fmt.Sprintf("no rule for %s in the nat table:\n%s\nkproxy's log:\n%s", clusterIP, rules, tailFile(logPath))
		}
		return true, ""
	})
	// client-go logs refused requests and retries; none may have been.
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "forbidden") {
		t.Errorf("kproxy was refused a request with system:node-proxier's permissions:\n%s", log)
	}
}

// containerArgs returns the DaemonSet's command for bin, with the kubelet's
// $(NODE_NAME) expanded to node and the mount paths moved by mount, and the
// URL its readiness probe asks on the node.
func containerArgs(t *testing.T, ds *unstructured.Unstructured, configMap map[string]string, node string, mount func(string) string) (args []string, probe string) {
	t.Helper()
	containers, _, err := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) != 1 {
		t.Fatalf("DaemonSet %s: want one container (%v)", ds.GetName(), err)
	}
	c, _ := containers[0].(map[string]any)
	command, _, err := unstructured.NestedStringSlice(c, "command")
	if err != nil || len(command) == 0 || path.Base(command[0]) != "kproxy" {
		t.Fatalf("DaemonSet %s: command %q does not run kproxy (%v)", ds.GetName(), command, err)
	}
	env := containerEnv(t, c, configMap, node)
	for _, want := range []string{"$(NODE_NAME)", "$(API_SERVER)"} {
		if !slices.ContainsFunc(command, func(a string) bool { return strings.Contains(a, want) }) {
			t.Fatalf("DaemonSet %s: command %q does not pass %s", ds.GetName(), command, want)
		}
	}
	for _, a := range command[1:] {
		for name, value := range env {
			a = strings.ReplaceAll(a, "$("+name+")", value)
		}
		args = append(args, mount(a))
	}
	probePath, _, _ := unstructured.NestedString(c, "readinessProbe", "httpGet", "path")
	port, _, _ := unstructured.NestedFieldNoCopy(c, "readinessProbe", "httpGet", "port")
	p, ok := port.(float64)
	if probePath == "" || !ok {
		t.Fatalf("DaemonSet %s: no readinessProbe.httpGet with a path and a numeric port", ds.GetName())
	}
	// hostNetwork: the kubelet probes the node's address.
	return args, "http://127.0.0.1:" + strconv.Itoa(int(p)) + probePath
}

// containerEnv resolves a container's environment as the kubelet does for
// the sources the manifest uses: the node's name, and keys of kproxy's
// ConfigMap (configMap, which must hold each key referred to).
func containerEnv(t *testing.T, c map[string]any, configMap map[string]string, node string) map[string]string {
	t.Helper()
	vars, _, err := unstructured.NestedSlice(c, "env")
	if err != nil {
		t.Fatalf("the container's env: %v", err)
	}
	env := map[string]string{}
	for _, v := range vars {
		v, _ := v.(map[string]any)
		name, _, _ := unstructured.NestedString(v, "name")
		field, _, _ := unstructured.NestedString(v, "valueFrom", "fieldRef", "fieldPath")
		key, _, _ := unstructured.NestedString(v, "valueFrom", "configMapKeyRef", "key")
		switch {
		case field == "spec.nodeName":
			env[name] = node
		case key != "":
			value, ok := configMap[key]
			if !ok {
				t.Fatalf("env %s: the test has no value for ConfigMap key %q", name, key)
			}
			env[name] = value
		default:
			t.Fatalf("env %s: a source the test does not resolve: %v", name, v)
		}
	}
	return env
}

// start runs kproxy with its output in logPath; stop ends it.
func start(t *testing.T, bin string, args []string, logPath string) (stop func()) {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
}

func get(url string) (int, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// natRules is the namespace's IPv4 nat table from both iptables backends:
// kproxy picks one as kube-proxy does.
func natRules() string {
	var b strings.Builder
	for _, tool := range []string{"iptables-nft-save", "iptables-legacy-save"} {
		out, err := exec.Command(tool, "-t", "nat").CombinedOutput()
		fmt.Fprintf(&b, "# %s (%v)\n%s", tool, err, out)
	}
	return b.String()
}

// replaceAll replaces each old with its new (pairs), failing the test when
// an old does not occur: the manifest changed under the test.
func replaceAll(t *testing.T, s, what string, oldNew ...string) string {
	t.Helper()
	for i := 0; i+1 < len(oldNew); i += 2 {
		if !strings.Contains(s, oldNew[i]) {
			t.Fatalf("%s has no %q to replace:\n%s", what, oldNew[i], s)
		}
		s = strings.ReplaceAll(s, oldNew[i], oldNew[i+1])
	}
	return s
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tailFile(p string) string {
	data, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	if len(data) > 4096 {
		data = data[len(data)-4096:]
	}
	return string(data)
}

// only returns the one object of kind in objs.
func only(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s, have %d", kind, len(found))
	}
	return found[0]
}
