package userspace_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// The end-to-end tests run the real kproxy binary in --proxy-mode=userspace on
// the lab's node, fed by a services file, with real clients on the client
// host and on the node, and real servers on the backends.

const (
	webVIP      = "198.18.0.10"
	echoVIP     = "198.18.0.53"
	emptyVIP    = "198.18.0.99"
	stickyVIP   = "198.18.0.20"
	digestVIP   = "198.18.0.30"
	externalIP  = "198.18.5.10"
	nodeIP      = "198.19.0.1"
	webNodePort = 30080
)

// manifest renders the services file: web (TCP, named target port, NodePort,
// an external IP), echo (UDP), empty (no endpoints), sticky (ClientIP
// affinity) and digest (TCP, for half-close and integrity), with endpoints on
// the given backends.
func manifest(backends []string, stickyTimeout int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Node
metadata: {name: node}
status: {addresses: [{type: InternalIP, address: %s}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: NodePort
  clusterIP: %s
  externalIPs: [%s]
  ports: [{name: http, port: 80, targetPort: http-web, nodePort: %d}]
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  clusterIP: %s
  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 9000}]
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  clusterIP: %s
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: default}
spec:
  clusterIP: %s
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: %d}}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: digest, namespace: default}
spec:
  clusterIP: %s
  ports: [{name: digest, port: 9002}]
`, nodeIP, webVIP, externalIP, webNodePort, echoVIP, emptyVIP, stickyVIP, stickyTimeout, digestVIP)
	for _, svc := range []struct{ name, port, proto string }{
		{"web", "http:8080", "TCP"}, {"echo", "dns:9000", "UDP"}, {"sticky", "http:8080", "TCP"}, {"digest", "digest:9002", "TCP"},
	} {
		name, port, _ := strings.Cut(svc.port, ":")
		fmt.Fprintf(&b, `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %s-1
  namespace: default
  labels: {kubernetes.io/service-name: %s}
addressType: IPv4
ports: [{name: %s, port: %s, protocol: %s}]
endpoints:
`, svc.name, svc.name, name, port, svc.proto)
		if len(backends) == 0 {
			b.WriteString("  []\n")
		}
		for _, ip := range backends {
			fmt.Fprintf(&b, "- {addresses: [%s], nodeName: other}\n", ip)
		}
	}
	return b.String()
}

type lab3 struct {
	topo     *lab.Topology
	servers  *lab.Servers
	manifest string
	kproxy   *lab.Process
	backends []string
}

// startLab builds the topology, starts the servers and runs kproxy on the
// node in userspace mode, on manifest with the given affinity timeout. It
// returns nil in the outer test process.
func startLab(t *testing.T, stickyTimeout int) *lab3 {
	t.Helper()
	return startFileLab(t, func(backends []string) string { return manifest(backends, stickyTimeout) })
}

// backendIPs lists the backends' IPv4 addresses, backend-1 first.
func backendIPs(topo *lab.Topology) []string {
	var ips []string
	for _, b := range topo.Backends {
		ips = append(ips, b.IPv4.String())
	}
	return ips
}

func (l *lab3) write(t *testing.T, content string) {
	t.Helper()
	tmp := l.manifest + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, l.manifest); err != nil {
		t.Fatal(err)
	}
}

func wantAllBackends(t *testing.T, what string, seen map[string]int, prefix bool) {
	t.Helper()
	if len(seen) != 3 {
		t.Fatalf("%s reached %d distinct backends, want all 3: %v", what, len(seen), seen)
	}
	for answer := range seen {
		name := answer
		if prefix {
			name, _, _ = strings.Cut(answer, " ")
		}
		if !regexp.MustCompile(`^backend-[123]$`).MatchString(name) {
			t.Errorf("%s: unexpected answer %q", what, answer)
		}
	}
}

func TestUserspaceClusterIPRoundRobin(t *testing.T) {
	l := startLab(t, 60)
	if l == nil {
		return
	}
	for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
		seen := lab.Spread(t, 9, func() (string, error) { return lab.HTTPGet(from, "http://"+webVIP+"/") })
		wantAllBackends(t, "TCP ClusterIP from "+from.Name, seen, false)
		for name, n := range seen {
			if n != 3 {
				t.Errorf("TCP ClusterIP from %s: %s answered %d of 9, want 3 (round-robin)", from.Name, name, n)
			}
		}
		seen = lab.Spread(t, 9, func() (string, error) { return lab.UDPAsk(from, echoVIP+":53", "ping") })
		wantAllBackends(t, "UDP ClusterIP from "+from.Name, seen, true)
	}
}

func TestUserspaceNodePortAndExternalIP(t *testing.T) {
	l := startLab(t, 60)
	if l == nil {
		return
	}
	for _, url := range []string{
		fmt.Sprintf("http://%s:%d/", nodeIP, webNodePort),
		"http://" + externalIP + "/",
	} {
		seen := lab.Spread(t, 6, func() (string, error) { return lab.HTTPGet(l.topo.Client, url) })
		wantAllBackends(t, url+" from the client", seen, false)
	}
	// The NodePort is claimed with a real socket: nothing else can take it.
	if ln, err := net.Listen("tcp", fmt.Sprintf(":%d", webNodePort)); err == nil {
		ln.Close()
		t.Errorf("port %d could be bound by another program; kproxy should hold it", webNodePort)
	}
}

func TestUserspaceRefusals(t *testing.T) {
	l := startLab(t, 60)
	if l == nil {
		return
	}
	t.Run("no endpoints is refused at once", func(t *testing.T) {
		for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
			conn, err := from.Dial("tcp", emptyVIP+":80")
			if err == nil {
				conn.Close()
				t.Fatalf("from %s: a service without endpoints accepted the connection", from.Name)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("from %s: connecting to a service without endpoints gave %v, want connection refused", from.Name, err)
			}
		}
	})
	t.Run("a direct connection to a proxy port is refused", func(t *testing.T) {
		save := l.topo.Node.MustExec("iptables-save", "-t", "nat")
		m := regexp.MustCompile(`-d ` + regexp.QuoteMeta(webVIP) + `/32 .*--to-ports (\d+)`).FindStringSubmatch(save)
		if m == nil {
			t.Fatalf("no REDIRECT portal for %s in:\n%s", webVIP, save)
		}
		conn, err := l.topo.Client.Dial("tcp", net.JoinHostPort(nodeIP, m[1]))
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, rerr := conn.Read(make([]byte, 1))
			conn.Close()
			if rerr == nil || n > 0 {
				t.Fatalf("a client connecting straight to proxy port %s was relayed", m[1])
			}
		}
	})
}

func TestUserspaceEndpointChangesAndAffinity(t *testing.T) {
	l := startLab(t, 2)
	if l == nil {
		return
	}
	t.Run("affinity pins a client", func(t *testing.T) {
		seen := lab.Spread(t, 6, func() (string, error) { return lab.HTTPGet(l.topo.Client, "http://"+stickyVIP+"/") })
		if len(seen) != 1 {
			t.Fatalf("ClientIP affinity: one client reached %v, want a single backend", seen)
		}
	})
	t.Run("affinity expires after its timeout", func(t *testing.T) {
		first, err := lab.HTTPGet(l.topo.Client, "http://"+stickyVIP+"/")
		if err != nil {
			t.Fatal(err)
		}
		lab.Eventually(t, "the pin to expire and another backend to answer", func() (bool, string) {
			time.Sleep(2200 * time.Millisecond) // longer than the 2 s affinity timeout, unused
			got, err := lab.HTTPGet(l.topo.Client, "http://"+stickyVIP+"/")
			return err == nil && got != first, got
		})
	})
	t.Run("a removed endpoint stops getting traffic", func(t *testing.T) {
		l.write(t, manifest(l.backends[:2], 2))
		lab.Eventually(t, "backend-3 to leave the rotation", func() (bool, string) {
			seen := lab.Spread(t, 6, func() (string, error) { return lab.HTTPGet(l.topo.Client, "http://"+webVIP+"/") })
			return seen["backend-3"] == 0 && len(seen) == 2, fmt.Sprint(seen)
		})
	})
	t.Run("an added endpoint gets traffic", func(t *testing.T) {
		l.write(t, manifest(l.backends, 2))
		lab.Eventually(t, "backend-3 to rejoin the rotation", func() (bool, string) {
			seen := lab.Spread(t, 6, func() (string, error) { return lab.HTTPGet(l.topo.Client, "http://"+webVIP+"/") })
			return len(seen) == 3, fmt.Sprint(seen)
		})
	})
	t.Run("a deleted service stops answering", func(t *testing.T) {
		l.write(t, strings.Replace(manifest(l.backends, 2), "name: web,", "name: web-renamed,", 1))
		lab.Eventually(t, "the old portal to go away", func() (bool, string) {
			save := l.topo.Node.MustExec("iptables-save", "-t", "nat")
			return !strings.Contains(save, `"default/web:http"`), save
		})
	})
}

func TestUserspaceHalfCloseAndIntegrity(t *testing.T) {
	l := startLab(t, 60)
	if l == nil {
		return
	}
	const size = 1 << 30
	conn, err := l.topo.Client.Dial("tcp", digestVIP+":9002")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sum, err := sendPattern(conn, size)
	if err != nil {
		t.Fatalf("sending 1 GiB: %v", err)
	}
	// Half-close: the backend sees EOF and still answers on this connection.
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	reply, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the digest after half-close: %v", err)
	}
	backend, n, digest, err := lab.ParseTCPDigestReply(string(reply))
	if err != nil {
		t.Fatal(err)
	}
	if n != size || digest != sum {
		t.Fatalf("%s received %d bytes with sha256 %s; sent %d bytes with sha256 %s", backend, n, digest, int64(size), sum)
	}
}

func TestUserspaceCleanupRestoresTables(t *testing.T) {
	bin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
		return
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 3})
	backends := backendIPs(topo)
	dumps := func() string {
		var b strings.Builder
		for _, cmd := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
			b.WriteString(lab.WithoutComments(topo.Node.MustExec(cmd)))
		}
		return b.String()
	}
	// Rules of the operator's own, which must survive. They also make the
	// nat and filter tables exist beforehand, as on any real node: kproxy,
	// like kube-proxy, cannot tell an empty table it created from one that
	// was there, and leaves tables (not its chains) in place.
	topo.Node.MustExec("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "198.19.1.0/24", "-j", "MASQUERADE")
	topo.Node.MustExec("iptables", "-t", "filter", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
	before := dumps()

	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(manifest(backends, 60)), 0o644); err != nil {
		t.Fatal(err)
	}
	kp := topo.Node.Start(bin, "--proxy-mode=userspace", "--services-file="+file, "--hostname-override=node")
	lab.Eventually(t, "kproxy to program portals", func() (bool, string) {
		save := topo.Node.MustExec("iptables-save", "-t", "nat")
		return strings.Contains(save, "KUBE-PORTALS-CONTAINER") && strings.Contains(save, webVIP), save
	})
	if err := kp.Stop(); err != nil {
		t.Logf("stopping kproxy: %v", err)
	}
	if out, err := topo.Node.Exec(bin, "--cleanup"); err != nil {
		t.Fatalf("kproxy --cleanup: %v\n%s", err, out)
	}
	if after := dumps(); after != before {
		t.Fatalf("--cleanup did not restore the tables.\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// sendPattern writes size bytes of a fixed pseudo-random pattern and returns
// their sha256 in hex.
func sendPattern(w io.Writer, size int64) (string, error) {
	block := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(block); i += 8 {
		binary.LittleEndian.PutUint64(block[i:], rng.Uint64())
	}
	h := sha256.New()
	out := io.MultiWriter(w, h)
	for sent := int64(0); sent < size; sent += int64(len(block)) {
		if _, err := out.Write(block[:min(int64(len(block)), size-sent)]); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
