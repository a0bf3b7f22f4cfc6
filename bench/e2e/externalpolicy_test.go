package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// Services with externalTrafficPolicy=Local: one with an endpoint on this
// node (backend-2), one with endpoints only elsewhere, and a Cluster-policy
// service to compare with.
const (
	etpLocalVIP       = "198.18.0.110"
	etpRemoteVIP      = "198.18.0.111"
	etpClusterVIP     = "198.18.0.112"
	etpLocalIngress   = "198.18.7.1"
	etpRemoteIngress  = "198.18.7.2"
	etpLocalNodePort  = 30090
	etpRemoteNodePort = 30091
	etpClusterPort    = 30092
	etpLocalHealth    = 30301
	etpRemoteHealth   = 30302
)

// externalPolicyServices renders the three services; localBackend is the
// index of the backend running on this node in etp-local (etp-remote's
// endpoints are all elsewhere), or -1 for none; remoteLocal moves backend-3
// of etp-remote onto this node.
func externalPolicyServices(backends []string, localBackend int, remoteLocal bool) string {
	lbLocal := func(name, vip string, nodePort, healthPort int, ingress string) string {
		return serviceDoc(name, fmt.Sprintf("type: LoadBalancer, clusterIP: %s, externalTrafficPolicy: Local, healthCheckNodePort: %d, "+
			"ports: [{name: http, port: 80, targetPort: 8080, nodePort: %d}]", vip, healthPort, nodePort),
			"loadBalancer: {ingress: [{ip: "+ingress+"}]}")
	}
	var local, remote []string
	for i, ip := range backends {
		node := "other"
		if i == localBackend {
			node = "node"
		}
		local = append(local, endpoint(ip, node, ""))
		node = "other"
		if remoteLocal && i == 2 {
			node = "node"
		}
		remote = append(remote, endpoint(ip, node, ""))
	}
	return docs(nodeDoc,
		lbLocal("etp-local", etpLocalVIP, etpLocalNodePort, etpLocalHealth, etpLocalIngress),
		lbLocal("etp-remote", etpRemoteVIP, etpRemoteNodePort, etpRemoteHealth, etpRemoteIngress),
		serviceDoc("etp-cluster", fmt.Sprintf("type: NodePort, clusterIP: %s, "+
			"ports: [{name: http, port: 80, targetPort: 8080, nodePort: %d}]", etpClusterVIP, etpClusterPort), ""),
		httpSlice("etp-local", local...), httpSlice("etp-remote", remote...),
		httpSlice("etp-cluster", remoteEndpoints(backends, "")...))
}

// askSource asks nginx's client-address page behind base, from d, and
// returns "<backend> <source address it saw>".
func askSource(d lab.Dialer, base string) func() (string, error) {
	return askHTTP(d, base+lab.ClientAddressURLPath)
}

func TestExternalTrafficPolicyLocal(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string { return externalPolicyServices(backends, 1, false) })
		if l == nil {
			return
		}
		client := l.topo.Client
		if m.relays {
			// The policy picks the local endpoint.
			t.Run("only the local endpoint serves", func(t *testing.T) {
				for _, base := range []string{fmt.Sprintf("http://%s:%d", nodeIP, etpLocalNodePort), "http://" + etpLocalIngress} {
					seen := lab.Spread(t, 6, askHTTP(client, base+"/"))
					wantOnly(t, "externalTrafficPolicy=Local through "+base, seen, "backend-2")
				}
			})
		}
		if m.keepsClientAddress {
			t.Run("the local endpoint sees the client's address", func(t *testing.T) {
				want := "backend-2 " + clientIP
				for _, base := range []string{fmt.Sprintf("http://%s:%d", nodeIP, etpLocalNodePort), "http://" + etpLocalIngress} {
					seen := lab.Spread(t, 6, askSource(client, base))
					wantOnly(t, "externalTrafficPolicy=Local through "+base, seen, want)
				}
			})
			t.Run("the Cluster policy masquerades as the node", func(t *testing.T) {
				// The contrast shows the probe tells the two apart.
				seen := lab.Spread(t, 6, askSource(client, fmt.Sprintf("http://%s:%d", nodeIP, etpClusterPort)))
				for answer := range seen {
					if _, source, _ := strings.Cut(answer, " "); source != l.topo.Node.PodIPv4.String() {
						t.Fatalf("externalTrafficPolicy=Cluster: backends saw sources %v, want the node's %s", seen, l.topo.Node.PodIPv4)
					}
				}
			})
		}
		t.Run("without local endpoints external traffic is not served", func(t *testing.T) {
			for _, addr := range []string{fmt.Sprintf("%s:%d", nodeIP, etpRemoteNodePort), etpRemoteIngress + ":80"} {
				what := "externalTrafficPolicy=Local without local endpoints through " + addr
				if m.localPortals {
					// The sockets stay but drop new clients.
					wantDropped(t, client, what, addr)
					continue
				}
				wantNotServed(t, client, what, addr)
			}
		})
		t.Run("from the node itself, external traffic without local endpoints goes to every endpoint", func(t *testing.T) {
			// kube-proxy's short-circuit of node-local traffic: as if it
			// had come in through an outside load balancer.
			// Under local portals the node reaches the load-balancer IP
			// from that address itself (a local route's source).
			for _, base := range []string{fmt.Sprintf("http://%s:%d", nodeIP, etpRemoteNodePort), "http://" + etpRemoteIngress} {
				l.wantBalanced(t, "externalTrafficPolicy=Local from the node through "+base, askHTTP(l.topo.Node, base+"/"))
			}
		})
		t.Run("the policy leaves the cluster IP alone", func(t *testing.T) {
			l.wantBalanced(t, "ClusterIP of a Local-policy service without local endpoints", askHTTP(client, "http://"+etpRemoteVIP+"/"))
		})
	})
}

// healthCheck is kube-proxy's health-check node port answer.
type healthCheck struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// askHealth asks the health-check node port from d: the status and the
// decoded body.
func askHealth(d lab.Dialer, port int) (int, healthCheck, error) {
	var hc healthCheck
	status, body, err := lab.HTTPGetStatus(d, fmt.Sprintf("http://%s:%d/", nodeIP, port))
	if err != nil {
		return 0, hc, err
	}
	if err := json.Unmarshal([]byte(body), &hc); err != nil {
		return status, hc, fmt.Errorf("health check on port %d answered %d %q: %w", port, status, body, err)
	}
	return status, hc, nil
}

func TestHealthCheckNodePort(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string { return externalPolicyServices(backends, 1, false) })
		if l == nil {
			return
		}
		type want struct {
			port, status, localEndpoints int
			service                      string
		}
		check := func(w want) (bool, string) {
			status, hc, err := askHealth(l.topo.Client, w.port)
			got := fmt.Sprintf("%d %+v %v", status, hc, err)
			return err == nil && status == w.status && hc.LocalEndpoints == w.localEndpoints && hc.ServiceProxyHealthy &&
				hc.Service.Namespace == "default" && hc.Service.Name == w.service, got
		}
		for _, step := range []struct {
			name   string
			render func(backends []string) string // nil: as started
			wants  []want
		}{
			{"200 with a local endpoint, 503 without", nil, []want{
				{etpLocalHealth, http.StatusOK, 1, "etp-local"},
				{etpRemoteHealth, http.StatusServiceUnavailable, 0, "etp-remote"},
			}},
			{"the answers follow the endpoints", func(b []string) string { return externalPolicyServices(b, -1, true) }, []want{
				{etpLocalHealth, http.StatusServiceUnavailable, 0, "etp-local"},
				{etpRemoteHealth, http.StatusOK, 1, "etp-remote"},
			}},
		} {
			t.Run(step.name, func(t *testing.T) {
				if step.render != nil {
					l.write(t, step.render(l.backends))
				}
				for _, w := range step.wants {
					lab.Within(t, changeBound, fmt.Sprintf("health-check port %d answering %d", w.port, w.status),
						func() (bool, string) { return check(w) })
				}
			})
		}
	})
}

// The UDP service of the short-circuit case: externalTrafficPolicy Local,
// every endpoint on another node.
const (
	etpUDPVIP      = "198.18.0.122"
	etpUDPNodePort = 30095
)

// Under externalTrafficPolicy Local without local endpoints, UDP that
// starts on the node goes to every endpoint, as TCP does, while a client
// elsewhere is not served: in every mode and portal kind (socket-lookup
// portals serve it from their node-only sockets).
func TestExternalTrafficPolicyLocalShortCircuitsUDPFromTheNode(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string {
			return docs(nodeDoc,
				serviceDoc("etp-udp", fmt.Sprintf("type: NodePort, clusterIP: %s, externalTrafficPolicy: Local, "+
					"ports: [{name: src, port: %d, protocol: UDP, targetPort: %d, nodePort: %d}]",
					etpUDPVIP, srcUDPServicePort, lab.UDPSourcePort, etpUDPNodePort), ""),
				sliceDoc("etp-udp-1", "etp-udp", fmt.Sprintf("{name: src, port: %d, protocol: UDP}", lab.UDPSourcePort),
					remoteEndpoints(backends, "")...))
		})
		if l == nil {
			return
		}
		addr := fmt.Sprintf("%s:%d", nodeIP, etpUDPNodePort)
		seen := lab.Spread(t, 6, askUDPSource(l.topo.Node, addr))
		if len(seen) == 0 {
			t.Fatalf("UDP from the node to %s: no answer", addr)
		}
		t.Logf("UDP from the node to %s: %v", addr, seen)
		if got, err := askUDPSource(l.topo.Client, addr)(); err == nil {
			t.Fatalf("UDP from the client to %s was answered (%q); want no local endpoint to serve it", addr, got)
		}
	})
}
