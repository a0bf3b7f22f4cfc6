package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kproxy.dev/kproxy/bench/cluster/pki"
)

// Reference binaries, built into Config.ToolsBin by make tools and make
// cluster-tools.
const (
	etcdBinary              = "etcd"
	apiserverBinary         = "kube-apiserver"
	controllerManagerBinary = "kube-controller-manager"
	schedulerBinary         = "kube-scheduler"
	kubeletBinary           = "kubelet"
)

// cluster is one Up or Down at work.
type cluster struct {
	cfg   Config
	paths paths
	nodes []Node
	ca    *pki.CA
}

// credentials is a client certificate written to files.
type credentials struct{ cert, key string }

// APIServerURL is the API server's address inside the namespaces (the
// nodes' and the node proxies' kubeconfigs).
func APIServerURL() string {
	return "https://" + net.JoinHostPort(RouterIP, strconv.Itoa(APIServerPort))
}

// writePKI issues the certificates and service-account keys, and writes the
// kubeconfigs of the admin (through the host forwarder), the controller
// manager and the scheduler.
func (c *cluster) writePKI() error {
	if err := os.MkdirAll(c.paths.pki(""), 0o700); err != nil {
		return fmt.Errorf("creating the PKI directory: %w", err)
	}
	ca, err := pki.NewCA("kproxy-cluster-ca")
	if err != nil {
		return err
	}
	c.ca = ca
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if err := writeTo(pki.Pair{CertPEM: ca.CertPEM, KeyPEM: caKey}, c.paths.pki(""), "ca"); err != nil {
		return err
	}
	saKey, saPub, err := pki.ServiceAccountKeys()
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.paths.pki("sa.key"), saKey, 0o600); err != nil {
		return fmt.Errorf("writing the service-account key: %w", err)
	}
	if err := os.WriteFile(c.paths.pki("sa.pub"), saPub, 0o644); err != nil {
		return fmt.Errorf("writing the service-account key: %w", err)
	}
	issue := []struct {
		file string
		req  pki.Request
	}{
		{"apiserver", pki.Request{CommonName: "kube-apiserver", Server: true,
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			IPs:      []net.IP{net.ParseIP(RouterIP), net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)}}},
		{"apiserver-kubelet-client", pki.Request{CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}}},
		{"admin", pki.Request{CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}}},
		{"controller-manager", pki.Request{CommonName: "system:kube-controller-manager"}},
		{"scheduler", pki.Request{CommonName: "system:kube-scheduler"}},
	}
	for _, n := range c.nodes {
		issue = append(issue, struct {
			file string
			req  pki.Request
		}{n.Name, pki.Request{CommonName: "system:node:" + n.Name, Organizations: []string{"system:nodes"}}})
	}
	for _, i := range issue {
		p, err := ca.Issue(i.req)
		if err != nil {
			return err
		}
		if err := writeTo(p, c.paths.pki(""), i.file); err != nil {
			return err
		}
	}
	hostURL := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.cfg.APIPort))
	localURL := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(APIServerPort))
	for _, k := range []struct{ path, server, creds string }{
		{AdminKubeconfig(c.cfg.StateDir), hostURL, "admin"},
		{c.paths.control("controller-manager.kubeconfig"), localURL, "controller-manager"},
		{c.paths.control("scheduler.kubeconfig"), localURL, "scheduler"},
	} {
		if err := c.writeKubeconfig(k.path, k.server, k.creds); err != nil {
			return err
		}
	}
	return nil
}

// writeTo is pki.Pair.Write without the file names.
func writeTo(p pki.Pair, dir, base string) error {
	_, _, err := p.Write(dir, base)
	return err
}

func (c *cluster) creds(name string) credentials {
	return credentials{cert: c.paths.pki(name + ".crt"), key: c.paths.pki(name + ".key")}
}

// writeKubeconfig writes a kubeconfig for the client certificate creds.
func (c *cluster) writeKubeconfig(path, server, creds string) error {
	cr := c.creds(creds)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kproxy-cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: c.paths.pki("ca.crt")}
	cfg.AuthInfos[creds] = &clientcmdapi.AuthInfo{ClientCertificate: cr.cert, ClientKey: cr.key}
	cfg.Contexts["kproxy-cluster"] = &clientcmdapi.Context{Cluster: "kproxy-cluster", AuthInfo: creds}
	cfg.CurrentContext = "kproxy-cluster"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (c *cluster) tool(name string) string { return filepath.Join(c.cfg.ToolsBin, name) }

// startControlPlane starts the forwarder, etcd and kube-apiserver, waits
// for the API server, then starts the controller manager and scheduler.
func (c *cluster) startControlPlane(ctx context.Context) error {
	if err := c.start(daemon{name: "forwarder", cgroup: daemonsCgroup, argv: []string{c.cfg.Self, "forward",
		"-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.cfg.APIPort)),
		"-netns", RouterNetnsPath(), "-to", net.JoinHostPort(RouterIP, strconv.Itoa(APIServerPort))}}); err != nil {
		return err
	}
	const etcdURL = "http://127.0.0.1:2379"
	if err := c.start(daemon{name: "etcd", netns: routerNetns, cgroup: daemonsCgroup, argv: []string{c.tool(etcdBinary),
		"--name=kproxy-cluster",
		"--data-dir=" + c.paths.control("etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=kproxy-cluster=http://127.0.0.1:2380",
		// A throwaway cluster: fsync would only slow it on a busy disk.
		"--unsafe-no-fsync", "--log-level=warn",
	}}); err != nil {
		return err
	}
	etcd := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return DialIn(ctx, RouterNetnsPath(), network, addr)
	}}}
	if err := WaitFor(ctx, time.Minute, "etcd healthy", func(ctx context.Context) error {
		return httpOK(ctx, etcd, etcdURL+"/health")
	}); err != nil {
		return err
	}
	pk := c.paths.pki
	if err := c.start(daemon{name: "kube-apiserver", netns: routerNetns, cgroup: daemonsCgroup, argv: []string{c.tool(apiserverBinary),
		"--etcd-servers=" + etcdURL,
		"--bind-address=0.0.0.0",
		"--advertise-address=" + RouterIP,
		"--secure-port=" + strconv.Itoa(APIServerPort),
		"--tls-cert-file=" + pk("apiserver.crt"), "--tls-private-key-file=" + pk("apiserver.key"),
		"--client-ca-file=" + pk("ca.crt"),
		"--kubelet-client-certificate=" + pk("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pk("apiserver-kubelet-client.key"),
		"--service-account-key-file=" + pk("sa.pub"),
		"--service-account-signing-key-file=" + pk("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		// Nodes have no DNS names: reach kubelets (logs, exec) by address.
		"--kubelet-preferred-address-types=InternalIP",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--profiling=false",
	}}); err != nil {
		return err
	}
	client, err := c.adminClient()
	if err != nil {
		return err
	}
	if err := WaitFor(ctx, 2*time.Minute, "kube-apiserver ready", func(ctx context.Context) error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return err
	}
	if err := c.start(daemon{name: "kube-controller-manager", netns: routerNetns, cgroup: daemonsCgroup, argv: []string{c.tool(controllerManagerBinary),
		"--kubeconfig=" + c.paths.control("controller-manager.kubeconfig"),
		// No authentication or authorization kubeconfig: the API server has
		// no front-proxy CA for them to read, and only /healthz is asked.
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pk("sa.key"),
		"--root-ca-file=" + pk("ca.crt"),
		"--cluster-signing-cert-file=" + pk("ca.crt"), "--cluster-signing-key-file=" + pk("ca.key"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--profiling=false",
	}}); err != nil {
		return err
	}
	return c.start(daemon{name: "kube-scheduler", netns: routerNetns, cgroup: daemonsCgroup, argv: []string{c.tool(schedulerBinary),
		"--kubeconfig=" + c.paths.control("scheduler.kubeconfig"),
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--profiling=false",
	}})
}

// adminClient is a client through the host forwarder, as kubectl connects.
func (c *cluster) adminClient() (kubernetes.Interface, error) {
	return AdminClient(c.cfg.StateDir)
}

// AdminClient returns a client for the cluster in stateDir, as its admin.
func AdminClient(stateDir string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", AdminKubeconfig(stateDir))
	if err != nil {
		return nil, fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	rc.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return client, nil
}

func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
