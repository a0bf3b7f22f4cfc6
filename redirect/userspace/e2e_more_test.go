package userspace_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"kproxy.dev/kproxy/bench/lab"
)

// More end-to-end tests of the userspace mode: each runs the kproxy binary on
// the lab's node, fed by a services file written for the test (or by a real
// kube-apiserver), and drives real clients against the backends' servers.

// startFileLab is startLab with the services file the test renders from the
// backends' addresses. It returns nil in the outer test process.
func startFileLab(t *testing.T, render func(backends []string) string) *lab3 {
	t.Helper()
	bin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
		return nil
	}
	l := &lab3{}
	l.topo = lab.NewTopology(t, lab.TopologyOptions{Backends: 3})
	l.servers = lab.StartServers(t, l.topo, lab.ServerOptions{NoIperf: true})
	l.backends = backendIPs(l.topo)
	l.manifest = filepath.Join(t.TempDir(), "services.yaml")
	l.write(t, render(l.backends))
	l.kproxy = l.topo.Node.Start(bin, "--proxy-mode=userspace", "--services-file="+l.manifest,
		"--hostname-override=node", "--iptables-min-sync-period=0", "-v=2")
	lab.WaitSynced(t, l.kproxy, 1)
	return l
}

// Services-file pieces: each helper renders one YAML document, docs joins
// them into the file's stream.

const nodeDoc = `apiVersion: v1
kind: Node
metadata: {name: node}
status: {addresses: [{type: InternalIP, address: ` + nodeIP + `}]}
`

func docs(parts ...string) string { return strings.Join(parts, "---\n") }

// serviceDoc renders a Service in namespace default; spec and status are YAML
// flow mappings' contents (status may be empty).
func serviceDoc(name, spec, status string) string {
	s := fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: default}\nspec: {%s}\n", name, spec)
	if status != "" {
		s += fmt.Sprintf("status: {%s}\n", status)
	}
	return s
}

// sliceDoc renders an IPv4 EndpointSlice of service svc; ports is the flow
// sequence's contents, endpoints are endpoint flow mappings' contents.
func sliceDoc(name, svc, ports string, endpoints ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %s
  namespace: default
  labels: {kubernetes.io/service-name: %s}
addressType: IPv4
ports: [%s]
endpoints:
`, name, svc, ports)
	if len(endpoints) == 0 {
		b.WriteString("  []\n")
	}
	for _, ep := range endpoints {
		fmt.Fprintf(&b, "- {%s}\n", ep)
	}
	return b.String()
}

// endpoint renders an endpoint's contents: address, node name and, unless
// empty, conditions.
func endpoint(ip, nodeName, conditions string) string {
	s := fmt.Sprintf("addresses: [%s], nodeName: %s", ip, nodeName)
	if conditions != "" {
		s += ", conditions: {" + conditions + "}"
	}
	return s
}

const (
	readyCond       = "ready: true, serving: true, terminating: false"
	terminatingCond = "ready: false, serving: true, terminating: true"
	goneCond        = "ready: false, serving: false, terminating: true"
)

// httpSlice is a slice for a service whose port "http" targets nginx.
func httpSlice(svc string, endpoints ...string) string {
	return sliceDoc(svc+"-1", svc, "{name: http, port: 8080, protocol: TCP}", endpoints...)
}

// allEndpoints renders every backend as an endpoint on node "other".
func allEndpoints(backends []string, conditions string) []string {
	var eps []string
	for _, ip := range backends {
		eps = append(eps, endpoint(ip, "other", conditions))
	}
	return eps
}

// trySpread is spread for use inside eventually: a failed request is
// reported, not fatal.
func trySpread(n int, ask func() (string, error)) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		got, err := ask()
		if err != nil {
			return seen, err
		}
		seen[got]++
	}
	return seen, nil
}

// wantOnly fails unless every answer in seen came from backend.
func wantOnly(t *testing.T, what string, seen map[string]int, backend string) {
	t.Helper()
	if len(seen) != 1 || seen[backend] == 0 {
		t.Fatalf("%s: answers %v, want only %s", what, seen, backend)
	}
}

// wantRefused fails unless err says the connection was refused or reset by
// the proxy path: a service with nothing to serve it must not answer, and
// must not leave the client waiting for a timeout either.
func wantRefused(t *testing.T, what string, answer string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s answered %q, want a refusal", what, answer)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the client timed out (%v) instead of being refused", what, err)
	}
	t.Logf("%s: refused: %v", what, err)
}

// wantNotServed fails if a TCP client on h gets an answer from addr, or is
// accepted and then left hanging. Either a refused or an unanswered
// connection attempt passes: kube-proxy drops (rather than rejects) new
// connections to a service whose Local traffic policy leaves it no
// endpoint on this node, so the client retries as it would while a pod
// starts. What must not happen is a connection that is accepted and then
// neither answered nor closed.
func wantNotServed(t *testing.T, h *lab.Host, what, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Logf("%s: the connection was not established: %v", what, err)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		t.Logf("%s: the connection was closed at once: %v", what, err)
		return
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if n > 0 {
		t.Fatalf("%s: %s answered %q", what, addr, buf[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection to %s was accepted and then left hanging", what, addr)
	}
	t.Logf("%s: the connection was closed without an answer: %v", what, err)
}

// dialRefused dials addr over TCP from h and fails unless the connection is
// refused (a TCP reset answering the SYN).
func dialRefused(t *testing.T, h *lab.Host, what, addr string) {
	t.Helper()
	conn, err := h.Dial("tcp", addr)
	if err == nil {
		conn.Close()
		t.Fatalf("%s: connecting to %s succeeded, want it refused", what, addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s: connecting to %s failed with %v, want connection refused", what, addr, err)
	}
}

// digest sends payload to addr from h over TCP, half-closes, and returns the
// TCP digest server's reply after checking it counts and hashes payload.
func digest(h *lab.Host, addr, payload string) (string, error) {
	conn, err := h.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(conn, payload); err != nil {
		return "", err
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	reply, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	backend, n, sum, err := lab.ParseTCPDigestReply(string(reply))
	if err != nil {
		return "", err
	}
	if want := sha256.Sum256([]byte(payload)); n != int64(len(payload)) || sum != hex.EncodeToString(want[:]) {
		return "", fmt.Errorf("%s received %d bytes with sha256 %s; sent %d bytes with sha256 %x", backend, n, sum, len(payload), want)
	}
	return backend, nil
}

const (
	lbOpenVIP     = "198.18.0.40"
	lbAllowedVIP  = "198.18.0.41"
	lbDeniedVIP   = "198.18.0.42"
	lbOpenIP      = "198.18.6.1"
	lbAllowedIP   = "198.18.6.2"
	lbDeniedIP    = "198.18.6.3"
	lbOpenNodePrt = 30081
)

func TestUserspaceLoadBalancerIngress(t *testing.T) {
	l := startFileLab(t, func(backends []string) string {
		lb := func(name, vip string, nodePort int, ranges, ingress string) string {
			spec := fmt.Sprintf("type: LoadBalancer, clusterIP: %s, ports: [{name: http, port: 80, targetPort: 8080, nodePort: %d}]", vip, nodePort)
			if ranges != "" {
				spec += ", loadBalancerSourceRanges: [" + ranges + "]"
			}
			return serviceDoc(name, spec, "loadBalancer: {ingress: [{ip: "+ingress+"}]}")
		}
		eps := allEndpoints(backends, "")
		return docs(nodeDoc,
			lb("lb-open", lbOpenVIP, lbOpenNodePrt, "", lbOpenIP),
			// The client is 198.19.0.2: inside the first range, outside the second.
			lb("lb-allowed", lbAllowedVIP, 30082, "192.0.2.0/24, 198.19.0.0/24", lbAllowedIP),
			lb("lb-denied", lbDeniedVIP, 30083, "198.19.200.0/24", lbDeniedIP),
			httpSlice("lb-open", eps...), httpSlice("lb-allowed", eps...), httpSlice("lb-denied", eps...))
	})
	if l == nil {
		return
	}
	client := l.topo.Client
	for _, tc := range []struct{ what, url string }{
		{"LoadBalancer ingress IP", "http://" + lbOpenIP + "/"},
		{"NodePort of the LoadBalancer service", fmt.Sprintf("http://%s:%d/", nodeIP, lbOpenNodePrt)},
		{"LoadBalancer ingress IP admitting the client's range", "http://" + lbAllowedIP + "/"},
		{"ClusterIP of the service refusing the client's range", "http://" + lbDeniedVIP + "/"},
	} {
		seen := lab.Spread(t, 6, func() (string, error) { return lab.HTTPGet(client, tc.url) })
		wantAllBackends(t, tc.what+" from the client", seen, false)
	}
	dialRefused(t, client, "LoadBalancer ingress IP outside loadBalancerSourceRanges", lbDeniedIP+":80")
}

const multiVIP = "198.18.0.50"

func TestUserspaceMultiPortNamedTargetPorts(t *testing.T) {
	l := startFileLab(t, func(backends []string) string {
		// The service ports target named container ports; the slice lists
		// its ports under the service ports' names, in the other order, so
		// endpoints matched by position instead of name would cross over.
		svc := serviceDoc("multi", "clusterIP: "+multiVIP+", ports: ["+
			"{name: web, port: 80, targetPort: http-web}, "+
			"{name: upload, port: 7002, targetPort: digest-port}]", "")
		slice := sliceDoc("multi-1", "multi",
			"{name: upload, port: 9002, protocol: TCP}, {name: web, port: 8080, protocol: TCP}",
			allEndpoints(backends, "")...)
		return docs(nodeDoc, svc, slice)
	})
	if l == nil {
		return
	}
	for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
		seen := lab.Spread(t, 6, func() (string, error) { return lab.HTTPGet(from, "http://"+multiVIP+"/") })
		wantAllBackends(t, "port web (nginx) from "+from.Name, seen, false)
		seen = lab.Spread(t, 6, func() (string, error) {
			return digest(from, multiVIP+":7002", "upload through the second port of "+multiVIP)
		})
		wantAllBackends(t, "port upload (TCP digest server) from "+from.Name, seen, false)
	}
}

const (
	termAllVIP   = "198.18.0.60"
	termMixedVIP = "198.18.0.61"
	termGoneVIP  = "198.18.0.62"
)

func TestUserspaceTerminatingEndpoints(t *testing.T) {
	l := startFileLab(t, func(backends []string) string {
		svc := func(name, vip string) string {
			return serviceDoc(name, "clusterIP: "+vip+", ports: [{name: http, port: 80, targetPort: 8080}]", "")
		}
		return docs(nodeDoc,
			svc("term-all", termAllVIP), svc("term-mixed", termMixedVIP), svc("term-gone", termGoneVIP),
			httpSlice("term-all", allEndpoints(backends, terminatingCond)...),
			httpSlice("term-mixed",
				endpoint(backends[0], "other", terminatingCond),
				endpoint(backends[1], "other", readyCond),
				endpoint(backends[2], "other", terminatingCond)),
			httpSlice("term-gone", allEndpoints(backends, goneCond)...))
	})
	if l == nil {
		return
	}
	client := l.topo.Client
	t.Run("only serving-terminating endpoints still serve", func(t *testing.T) {
		seen := lab.Spread(t, 9, func() (string, error) { return lab.HTTPGet(client, "http://"+termAllVIP+"/") })
		wantAllBackends(t, "serving-terminating endpoints", seen, false)
	})
	t.Run("a ready endpoint is preferred to terminating ones", func(t *testing.T) {
		seen := lab.Spread(t, 9, func() (string, error) { return lab.HTTPGet(client, "http://"+termMixedVIP+"/") })
		wantOnly(t, "one ready endpoint among terminating ones", seen, "backend-2")
	})
	t.Run("terminating endpoints that stopped serving are not used", func(t *testing.T) {
		answer, err := lab.HTTPGet(client, "http://"+termGoneVIP+"/")
		wantRefused(t, "a service whose endpoints all stopped serving", answer, err)
	})
}

const (
	localVIP     = "198.18.0.70"
	localNoneVIP = "198.18.0.71"
)

func TestUserspaceInternalTrafficPolicyLocal(t *testing.T) {
	l := startFileLab(t, func(backends []string) string {
		svc := func(name, vip string) string {
			return serviceDoc(name, "clusterIP: "+vip+", internalTrafficPolicy: Local, ports: [{name: http, port: 80, targetPort: 8080}]", "")
		}
		return docs(nodeDoc,
			svc("local", localVIP), svc("local-none", localNoneVIP),
			// kproxy runs as node "node": backend-2 is its local endpoint.
			httpSlice("local",
				endpoint(backends[0], "other", ""),
				endpoint(backends[1], "node", ""),
				endpoint(backends[2], "other", "")),
			httpSlice("local-none", allEndpoints(backends, "")...))
	})
	if l == nil {
		return
	}
	for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
		seen := lab.Spread(t, 9, func() (string, error) { return lab.HTTPGet(from, "http://"+localVIP+"/") })
		wantOnly(t, "internalTrafficPolicy=Local from "+from.Name, seen, "backend-2")

		wantNotServed(t, from, "internalTrafficPolicy=Local without local endpoints from "+from.Name, localNoneVIP+":80")
	}
}

const (
	udpVIP        = "198.18.0.80"
	udpClientPort = 40053
)

// udpReply is one answer of the UDP echo server, as the client saw it.
type udpReply struct {
	backend string
	at      time.Time
}

func TestUserspaceUDPEndpointRemoval(t *testing.T) {
	render := func(backends []string) string {
		svc := serviceDoc("udp", "clusterIP: "+udpVIP+", ports: [{name: dns, port: 53, protocol: UDP, targetPort: 9000}]", "")
		return docs(nodeDoc, svc, sliceDoc("udp-1", "udp", "{name: dns, port: 9000, protocol: UDP}", allEndpoints(backends, "")...))
	}
	l := startFileLab(t, render)
	if l == nil {
		return
	}
	// One client socket with a fixed source port: one flow in kproxy's
	// table for the whole test.
	var conn *net.UDPConn
	err := l.topo.Client.InNetns(func() (err error) {
		conn, err = net.DialUDP("udp4",
			net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.topo.Client.IPv4, udpClientPort)),
			net.UDPAddrFromAddrPort(netip.MustParseAddrPort(udpVIP+":53")))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	var mu sync.Mutex
	var replies []udpReply
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // keeps sending, as a client would
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = fmt.Fprintf(conn, "query %d", i)
			}
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			n, err := conn.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue // e.g. an ICMP error while the flow moves
			}
			backend, _, _ := strings.Cut(string(buf[:n]), " ")
			mu.Lock()
			replies = append(replies, udpReply{backend, time.Now()})
			mu.Unlock()
		}
	}()
	defer func() { close(stop); conn.Close(); wg.Wait() }()
	since := func(i int) []udpReply {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(replies[min(i, len(replies)):])
	}

	lab.Eventually(t, "the first replies", func() (bool, string) { return len(since(0)) >= 5, "" })
	first := since(0)
	pinned := first[0].backend
	for _, r := range first {
		if r.backend != pinned {
			t.Fatalf("one client flow was answered by %s and %s, want one backend per flow", pinned, r.backend)
		}
	}

	var remaining []string
	for i, ip := range l.backends {
		if fmt.Sprintf("backend-%d", i+1) != pinned {
			remaining = append(remaining, ip)
		}
	}
	syncs := lab.SyncCount(t)
	l.write(t, render(remaining))
	lab.WaitSynced(t, l.kproxy, syncs+1)
	synced := time.Now()
	mark := len(since(0))

	// The removed backend's server still runs: only kproxy can move the
	// flow away from it.
	const bound = 2 * time.Second
	for {
		moved := -1
		after := since(mark)
		for i, r := range after {
			if r.backend != pinned {
				moved = i
				break
			}
		}
		if moved >= 0 {
			if d := after[moved].at.Sub(synced); d > bound {
				t.Fatalf("the flow reached another backend %v after the endpoint removal was synced, want within %v", d, bound)
			}
			t.Logf("the flow moved from %s to %s %v after the sync", pinned, after[moved].backend, after[moved].at.Sub(synced))
			mark += moved
			break
		}
		if time.Since(synced) > bound {
			t.Fatalf("%v after the removal of %s was synced, the flow's datagrams still reach only it (%d replies since)", bound, pinned, len(after))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// From then on the flow stays on a remaining backend.
	lab.Eventually(t, "more replies after the move", func() (bool, string) { return len(since(mark)) >= 10, "" })
	for _, r := range since(mark) {
		if r.backend == pinned {
			t.Fatalf("%s answered the flow again after it was removed: %v", pinned, since(mark))
		}
	}
}

// The API server tests run the same core cases with kproxy watching a real
// kube-apiserver (backed by etcd) in the node namespace.

// apiSlice builds an EndpointSlice for service svc with one port.
func apiSlice(svc, portName string, port int32, proto v1.Protocol, backends []string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-1", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port), Protocol: ptr.To(proto)}},
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, ip := range backends {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To("other"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func apiService(name, clusterIP, portName string, port, target int32, proto v1.Protocol) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{ClusterIP: clusterIP, Ports: []v1.ServicePort{{
			Name: portName, Port: port, Protocol: proto, TargetPort: intstr.FromInt32(target)}}},
	}
}

const (
	apiGoneVIP = "198.18.0.90"
	apiLateVIP = "198.18.0.91"
)

func TestUserspaceAPIServer(t *testing.T) {
	bin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
		return
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 3})
	lab.StartServers(t, topo, lab.ServerOptions{NoIperf: true})
	backends := backendIPs(topo)
	api := lab.StartAPIServer(t)
	client := api.Client
	lab.CreateNode(t, client, "node", nodeIP)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	services := client.CoreV1().Services(metav1.NamespaceDefault)
	endpointSlices := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
	createHTTP := func(name, vip string, ips []string) {
		t.Helper()
		must(services.Create(ctx, apiService(name, vip, "http", 80, 8080, v1.ProtocolTCP), metav1.CreateOptions{}))
		must(endpointSlices.Create(ctx, apiSlice(name, "http", 8080, v1.ProtocolTCP, ips), metav1.CreateOptions{}))
	}
	createHTTP("web", webVIP, backends)
	createHTTP("gone", apiGoneVIP, backends)
	must(services.Create(ctx, apiService("echo", echoVIP, "dns", 53, 9000, v1.ProtocolUDP), metav1.CreateOptions{}))
	must(endpointSlices.Create(ctx, apiSlice("echo", "dns", 9000, v1.ProtocolUDP, backends), metav1.CreateOptions{}))

	kp := topo.Node.Start(bin, "--proxy-mode=userspace", "--kubeconfig="+api.KubeconfigPath,
		"--hostname-override=node", "--iptables-min-sync-period=0", "-v=2")
	alive := func() {
		t.Helper()
		select {
		case <-kp.Exited():
			t.Fatalf("kproxy exited: %v\n%s", kp.Err(), kp.Log())
		default:
		}
	}
	askHTTP := func(vip string) func() (string, error) {
		return func() (string, error) { return lab.HTTPGet(topo.Client, "http://"+vip+"/") }
	}
	askWeb, askGone, askLate := askHTTP(webVIP), askHTTP(apiGoneVIP), askHTTP(apiLateVIP)
	askEcho := func() (string, error) { return lab.UDPAsk(topo.Client, echoVIP+":53", "ping") }
	lab.Eventually(t, "kproxy to serve the services from the API server", func() (bool, string) {
		alive()
		web, err := trySpread(3, askWeb)
		if err != nil {
			return false, fmt.Sprint(web, err)
		}
		gone, err := trySpread(3, askGone)
		return err == nil && len(web) == 3 && len(gone) == 3, fmt.Sprint(web, gone, err)
	})

	t.Run("round-robin over TCP and UDP", func(t *testing.T) {
		seen := lab.Spread(t, 9, askWeb)
		wantAllBackends(t, "TCP ClusterIP", seen, false)
		for name, n := range seen {
			if n != 3 {
				t.Errorf("TCP ClusterIP: %s answered %d of 9, want 3 (round-robin)", name, n)
			}
		}
		wantAllBackends(t, "UDP ClusterIP", lab.Spread(t, 9, askEcho), true)
	})

	setWebBackends := func(t *testing.T, ips []string) {
		t.Helper()
		cur, err := endpointSlices.Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		next := apiSlice("web", "http", 8080, v1.ProtocolTCP, ips)
		next.ResourceVersion = cur.ResourceVersion
		must(endpointSlices.Update(ctx, next, metav1.UpdateOptions{}))
	}

	t.Run("an endpoint removal takes effect within seconds", func(t *testing.T) {
		setWebBackends(t, backends[:2])
		lab.Within(t, 3*time.Second, "backend-3 leaving the rotation", func() (bool, string) {
			seen, err := trySpread(6, askWeb)
			return err == nil && len(seen) == 2 && seen["backend-3"] == 0, fmt.Sprint(seen, err)
		})
	})

	t.Run("a deleted service stops answering", func(t *testing.T) {
		if err := services.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := endpointSlices.Delete(ctx, "gone-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		lab.Within(t, 3*time.Second, "the deleted service's portal going away", func() (bool, string) {
			save := topo.Node.MustExec("iptables-save", "-t", "nat")
			return !strings.Contains(save, apiGoneVIP+"/32"), save
		})
		if answer, err := askGone(); err == nil {
			t.Fatalf("the deleted service still answered: %q", answer)
		}
		// The other services are untouched.
		if seen := lab.Spread(t, 6, askWeb); len(seen) != 2 {
			t.Fatalf("web after another service's deletion reached %v, want backend-1 and backend-2", seen)
		}
	})

	t.Run("an API server outage keeps traffic flowing", func(t *testing.T) {
		portals := func() string { // the nat table without iptables-save's dated comments
			return lab.WithoutComments(topo.Node.MustExec("iptables-save", "-t", "nat"))
		}
		before := portals()
		api.Stop()
		if _, err := services.Get(ctx, "web", metav1.GetOptions{}); err == nil {
			t.Fatal("the API server still answers after Stop")
		}
		// Meanwhile kproxy's watches fail and retry; what it programmed stays.
		for range 3 {
			time.Sleep(time.Second)
			alive()
			seen := lab.Spread(t, 6, askWeb)
			if len(seen) != 2 || seen["backend-3"] != 0 {
				t.Fatalf("TCP during the outage reached %v, want backend-1 and backend-2 as programmed", seen)
			}
			if seen := lab.Spread(t, 6, askEcho); len(seen) != 3 {
				t.Fatalf("UDP during the outage reached %v, want all 3 backends as programmed", seen)
			}
		}
		if after := portals(); after != before {
			t.Errorf("portal rules changed during the outage.\nbefore:\n%s\nafter:\n%s", before, after)
		}
		api.Start()
		// kproxy's Service and EndpointSlice watches both resume: changes
		// made after the restart arrive. client-go's reflectors (as in
		// kube-proxy) retry a failed list or watch with a jittered backoff
		// that grows to between 30 and 60 s and is only reset after two
		// healthy minutes, so one informer may take up to a minute after
		// the restart to reconnect; hence the long bound.
		setWebBackends(t, backends)
		createHTTP("late", apiLateVIP, backends[2:])
		changed := time.Now()
		lab.Within(t, 2*time.Minute, "an endpoint addition and a new service after the API server came back", func() (bool, string) {
			alive()
			web, err := trySpread(6, askWeb)
			if err != nil {
				return false, fmt.Sprint(web, err)
			}
			late, err := trySpread(2, askLate)
			return err == nil && len(web) == 3 && late["backend-3"] == 2, fmt.Sprint(web, late, err)
		})
		took := time.Since(changed)
		t.Logf("the changes made after the restart took effect after %v", took)
		if took > 30*time.Second {
			t.Logf("kproxy's log:\n%s", kp.Log())
		}
		alive()
	})
}
