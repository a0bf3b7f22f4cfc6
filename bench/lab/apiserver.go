package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ToolsBinEnv names the directory holding kube-apiserver, etcd and kube-proxy
// when they are not in <repo>/bench/tools/bin.
const ToolsBinEnv = "KPROXY_TOOLS_BIN"

// ServiceCIDR is the --service-cluster-ip-range of the lab API server.
const ServiceCIDR = "198.18.0.0/16"

const (
	adminToken = "kproxy-lab-admin-token"
	// hostReadyTimeout bounds etcd's and kube-apiserver's start on the
	// host (stretched in the guest kernel): set-up, not what a case
	// measures. In the guest with the host's cores busy kube-apiserver
	// took longer than 90 s, and once longer than 3 minutes.
	hostReadyTimeout = 3 * time.Minute
	// etcdCheckTimeout bounds kube-apiserver's own etcd health and
	// readiness checks (2 s by default), which a guest on a busy host
	// overran on every probe, so /readyz stayed 500.
	etcdCheckTimeout = "20s"
	// kube-apiserver drains open watches for up to a minute on SIGTERM;
	// a lab outage need not be graceful, so it is killed after this.
	stopTimeout  = 5 * time.Second
	logTailBytes = 8 << 10
	// startAttempts bounds how often Start starts a kube-apiserver that
	// exits before it is ready.
	startAttempts = 3
)

// APIServer is a real etcd plus kube-apiserver on the loopback of the test's
// network namespace, authenticated by a static admin token and with every
// request allowed.
type APIServer struct {
	// URL is the API server's https address.
	URL string
	// KubeconfigPath is a kubeconfig file for the admin user, for tools and
	// for kube-proxy's --kubeconfig.
	KubeconfigPath string
	// Config and Client talk to the API server as admin.
	Config *rest.Config
	Client kubernetes.Interface

	t       testing.TB
	binDir  string
	dir     string
	args    []string
	certDir string
	logPath string
	etcdLog string
	etcd    *exec.Cmd
	server  *exec.Cmd
	exited  chan struct{} // closed when server has exited
}

// StartAPIServer starts etcd and kube-apiserver, waits for /readyz, and stops
// both when the test ends. Call it inside lab.InFreshNetns: the servers bind
// the namespace's loopback. Both logs are kept in t.TempDir() and their tails
// are printed if the test fails.
func StartAPIServer(t testing.TB, opts ...APIServerOption) *APIServer {
	t.Helper()
	if os.Getenv(innerEnv) == "" {
		t.Fatal("lab.StartAPIServer must run inside lab.InFreshNetns: the API server binds the namespace's loopback")
	}
	binDir := ToolsBinDir(t)
	dir := t.TempDir()
	a := &APIServer{t: t, binDir: binDir, dir: dir,
		certDir: filepath.Join(dir, "certs"),
		logPath: filepath.Join(dir, "kube-apiserver.log"),
		etcdLog: filepath.Join(dir, "etcd.log"),
	}
	t.Cleanup(a.cleanup)

	etcdURL := a.startEtcd()
	a.args = a.apiserverArgs(etcdURL)
	for _, o := range opts {
		o(a)
	}
	a.URL = "https://" + net.JoinHostPort("127.0.0.1", a.flag("--secure-port"))
	a.Start()

	caData, err := os.ReadFile(filepath.Join(a.certDir, "apiserver.crt"))
	if err != nil {
		t.Fatalf("reading the API server's self-signed certificate: %v", err)
	}
	a.Config = &rest.Config{Host: a.URL, BearerToken: adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: caData}}
	client, err := kubernetes.NewForConfig(a.Config)
	if err != nil {
		t.Fatalf("creating a clientset for the lab API server: %v", err)
	}
	a.Client = client
	a.KubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(a.KubeconfigPath, a.URL, caData); err != nil {
		t.Fatal(err)
	}
	return a
}

// ToolsBinDir returns the directory with the reference binaries, failing the
// test if kube-apiserver or etcd is missing from it.
func ToolsBinDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(ToolsBinEnv)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			t.Fatalf("finding the kproxy repository root for bench/tools/bin (or set %s): %v", ToolsBinEnv, err)
		}
		dir = filepath.Join(root, "bench", "tools", "bin")
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s not found in %s: run `make tools` (or `make test`) to build kube-apiserver and etcd: %v", name, dir, err)
		}
	}
	return dir
}

// repoRoot walks up from the working directory (a test's package directory)
// to the directory whose go.mod declares the kproxy module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(mod), []byte("module kproxy.dev/kproxy\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod for module kproxy.dev/kproxy above the working directory")
		}
		dir = parent
	}
}

func (a *APIServer) startEtcd() string {
	t := a.t
	client, peer := freePort(t), freePort(t)
	clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	cmd := exec.Command(filepath.Join(a.binDir, "etcd"),
		"--name=lab",
		"--data-dir="+filepath.Join(a.dir, "etcd-data"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=lab="+peerURL,
		// Test data is disposable; skipping fsync keeps etcd fast on slow disks.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err := a.startLogged(cmd, a.etcdLog); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	a.etcd = cmd
	go func() { _ = cmd.Wait() }()

	readyTimeout := stretched(hostReadyTimeout)
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := http.Get(clientURL + "/health")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return clientURL
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd at %s not healthy after %v: %v", clientURL, readyTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *APIServer) apiserverArgs(etcdURL string) []string {
	t := a.t
	keyFile := filepath.Join(a.dir, "sa.key")
	pubFile := filepath.Join(a.dir, "sa.pub")
	if err := writeServiceAccountKeys(keyFile, pubFile); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(a.dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(adminToken+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatalf("writing token file: %v", err)
	}
	return []string{
		"--etcd-servers=" + etcdURL,
		"--etcd-healthcheck-timeout=" + etcdCheckTimeout,
		"--etcd-readycheck-timeout=" + etcdCheckTimeout,
		"--bind-address=127.0.0.1",
		// A fresh namespace has no default route to pick an address from.
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(freePort(t)),
		"--cert-dir=" + a.certDir,
		"--service-account-key-file=" + pubFile,
		"--service-account-signing-key-file=" + keyFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=AlwaysAllow",
		"--service-cluster-ip-range=" + ServiceCIDR,
		// The lab runs no kube-controller-manager, so nothing would create
		// service accounts the admission plugin waits for.
		"--disable-admission-plugins=ServiceAccount",
		"--profiling=false",
		// No API Priority and Fairness: it writes its bootstrap objects
		// through the server's own client at every start, which a guest
		// kernel on a busy host could not finish within the minute
		// kube-apiserver gives its start-up checks.
		"--enable-priority-and-fairness=false",
		"--v=1",
	}
}

func (a *APIServer) flag(name string) string {
	for _, arg := range a.args {
		if v, ok := strings.CutPrefix(arg, name+"="); ok {
			return v
		}
	}
	return ""
}

// Start starts kube-apiserver (again, after Stop) on the same port with the
// same etcd, and waits until it is ready. kube-apiserver exits by design when
// a start-up check overruns (its initial ClusterIP and NodePort repair must
// finish within a minute), which a guest kernel on a busy host can cause; as a
// kubelet does for a static pod, Start then starts it again, a few times.
func (a *APIServer) Start() {
	t := a.t
	t.Helper()
	if a.server != nil {
		t.Fatal("lab API server already running")
	}
	for attempt := 1; ; attempt++ {
		err := a.startOnce()
		if err == nil {
			return
		}
		if !errors.Is(err, errExitedEarly) || attempt == startAttempts {
			t.Fatalf("kube-apiserver not ready (attempt %d of %d): %v\n%s", attempt, startAttempts, err, tail(a.logPath))
		}
		t.Logf("starting kube-apiserver again (attempt %d of %d): %v", attempt+1, startAttempts, err)
	}
}

// errExitedEarly is kube-apiserver exiting before it became ready.
var errExitedEarly = errors.New("kube-apiserver exited before it was ready")

// startOnce starts kube-apiserver and waits until it is ready; on an error
// no kube-apiserver is left running.
func (a *APIServer) startOnce() error {
	cmd := exec.Command(filepath.Join(a.binDir, "kube-apiserver"), a.args...)
	if err := a.startLogged(cmd, a.logPath); err != nil {
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := a.waitReady(exited); err != nil {
		if errors.Is(err, errExitedEarly) {
			return fmt.Errorf("%w (%v); its fatal lines: %s", err, cmd.ProcessState, fatalLines(a.logPath))
		}
		if stopErr := stopProcess(cmd, exited); stopErr != nil {
			a.t.Logf("stopping the kube-apiserver that did not become ready: %v", stopErr)
		}
		return err
	}
	a.server, a.exited = cmd, exited
	return nil
}

// Stop stops kube-apiserver, leaving etcd and its data in place; clients see
// an outage until Start.
func (a *APIServer) Stop() {
	t := a.t
	t.Helper()
	if a.server == nil {
		t.Fatal("lab API server not running")
	}
	if err := stopProcess(a.server, a.exited); err != nil {
		t.Fatalf("stopping kube-apiserver: %v", err)
	}
	a.server = nil
}

func (a *APIServer) waitReady(exited <-chan struct{}) error {
	// The CA is not known before the server wrote its certificate, and
	// readiness is all that is asked here, so skip verification.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback readiness probe only
	}}
	defer client.CloseIdleConnections()
	readyTimeout := stretched(hostReadyTimeout)
	deadline := time.Now().Add(readyTimeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errExitedEarly
		default:
		}
		// verbose: a failed probe's body names the checks that failed.
		req, err := http.NewRequest(http.MethodGet, a.URL+"/readyz?verbose", nil)
		if err != nil {
			return fmt.Errorf("building readiness request: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status + ", failing: " + failedChecks(string(body))
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s/readyz not OK after %v (last: %s)", a.URL, readyTimeout, last)
}

// failedChecks picks the failed checks ("[-]name failed: …") out of a
// verbose /readyz body.
func failedChecks(body string) string {
	var failed []string
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, "[-]") {
			failed = append(failed, strings.TrimPrefix(line, "[-]"))
		}
	}
	if len(failed) == 0 {
		return "none named"
	}
	return strings.Join(failed, "; ")
}

// startLogged starts cmd with its output appended to logPath, so a restarted
// process adds to the same log. The process is killed if the test process dies.
func (a *APIServer) startLogged(cmd *exec.Cmd, logPath string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening log %s: %w", logPath, err)
	}
	defer f.Close() // the child has its own descriptor
	fmt.Fprintf(f, "=== %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd.Start()
}

func (a *APIServer) cleanup() {
	if a.server != nil {
		if err := stopProcess(a.server, a.exited); err != nil {
			a.t.Logf("stopping kube-apiserver: %v", err)
		}
		a.server = nil
	}
	if a.etcd != nil && a.etcd.Process != nil {
		_ = a.etcd.Process.Kill()
	}
	if a.t.Failed() {
		a.t.Logf("kube-apiserver log tail:\n%s", tail(a.logPath))
		a.t.Logf("etcd log tail:\n%s", tail(a.etcdLog))
	}
}

// stopProcess asks the process to terminate and kills it if it is still
// running after stopTimeout; either way it has exited on return.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}) error {
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling pid %d: %w", cmd.Process.Pid, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing pid %d: %w", cmd.Process.Pid, err)
	}
	<-exited
	return nil
}

// fatalLines picks klog's fatal lines ("F1130 12:00:00.000000 …") out of the
// last run in a log: the reason kube-apiserver gave for exiting, which its
// goroutine dump would push out of the tail.
func fatalLines(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	if i := bytes.LastIndex(data, []byte("\n=== ")); i >= 0 {
		data = data[i+1:]
	}
	var fatal []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if len(line) < 5 || line[0] != 'F' {
			continue
		}
		if _, err := strconv.Atoi(line[1:5]); err == nil { // the month and day
			fatal = append(fatal, line)
		}
	}
	if len(fatal) == 0 {
		return "(none)"
	}
	return strings.Join(fatal, "\n")
}

func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	if len(data) > logTailBytes {
		data = data[len(data)-logTailBytes:]
	}
	return indent(data)
}

// freePort asks the kernel for an unused loopback TCP port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeServiceAccountKeys writes an RSA key pair for signing and verifying
// service-account tokens.
func writeServiceAccountKeys(keyFile, pubFile string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generating service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding service-account public key: %w", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return fmt.Errorf("writing service-account key: %w", err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return fmt.Errorf("writing service-account public key: %w", err)
	}
	return nil
}

func writeKubeconfig(path, server string, caData []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: adminToken}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "admin"}
	cfg.CurrentContext = "lab"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// CreateNode creates a Node named name whose status lists internalIPs as
// InternalIP addresses (kube-proxy waits for a node address before it
// starts), and returns it as stored.
func CreateNode(t testing.TB, client kubernetes.Interface, name string, internalIPs ...string) *v1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{v1.LabelHostname: name},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	// Status is not taken from a create; it has its own subresource.
	for _, ip := range internalIPs {
		node.Status.Addresses = append(node.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	node.Status.Addresses = append(node.Status.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: name})
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}}
	node, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("setting addresses of node %s: %v", name, err)
	}
	return node
}
