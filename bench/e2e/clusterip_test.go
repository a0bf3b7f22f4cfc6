package e2e

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

func TestClusterIP(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		// From another host, from the node itself, and from a pod on the
		// node (a backend, which may be sent to itself). The IPVS and
		// nftables modes, as kube-proxy's, masquerade such hairpin traffic
		// only for endpoints on this node, and the services file does not
		// place the backends on it.
		from := []*lab.Host{l.topo.Client, l.topo.Node}
		if !m.localHairpinsOnly {
			from = append(from, l.topo.Backends[0])
		}
		for _, from := range from {
			l.wantBalanced(t, "TCP ClusterIP from "+from.Name, askHTTP(from, "http://"+webVIP+"/"))
			l.wantBalanced(t, "UDP ClusterIP from "+from.Name, l.askUDPNewFlows(t, from, echoVIP+":53"))
		}
	})
}

func TestRefusals(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		t.Run("no endpoints is refused at once", func(t *testing.T) {
			for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
				dialRefused(t, from, "TCP to a service without endpoints from "+from.Name, emptyVIP+":80")
				// A datagram the node itself sends and a REJECT rule stops in
				// OUTPUT fails its send with EPERM; one from elsewhere comes
				// back as an ICMP port unreachable (ECONNREFUSED).
				answer, err := lab.UDPAsk(from, emptyVIP+":53", "ping")
				if !errors.Is(err, syscall.ECONNREFUSED) && !(from == l.topo.Node && errors.Is(err, syscall.EPERM)) {
					t.Errorf("UDP to a service without endpoints from %s: answer %q, error %v; want it refused", from.Name, answer, err)
				}
			}
		})
		if !m.relays || m.localPortals {
			// Local portals have no proxy ports: the relays listen on the
			// service addresses themselves.
			return
		}
		t.Run("a direct connection to a proxy port is refused", func(t *testing.T) {
			save := l.natRules(t)
			match := regexp.MustCompile(`-d ` + regexp.QuoteMeta(webVIP) + `/32 .*--to-ports (\d+)`).FindStringSubmatch(save)
			if match == nil {
				t.Fatalf("no REDIRECT portal for %s in:\n%s", webVIP, save)
			}
			conn, err := l.topo.Client.Dial("tcp", net.JoinHostPort(nodeIP, match[1]))
			if err != nil {
				t.Logf("the connection to proxy port %s was refused: %v", match[1], err)
				return
			}
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, err := conn.Read(make([]byte, 1)); err == nil || n > 0 {
				t.Fatalf("a client connecting straight to proxy port %s was relayed", match[1])
			}
		})
	})
}

// TestNodePortAddressesPrimary: with --nodeport-addresses=primary and no
// --bind-address, NodePorts answer only on the Node object's address, not on
// the node's other one (its pod-side address, which answers without the
// flag: TestNodePortAndExternalIP), in every mode.
func TestNodePortAddressesPrimary(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m, "--nodeport-addresses=primary")
		if l == nil {
			return
		}
		url := fmt.Sprintf("http://%s:%d/", nodeIP, webNodePort)
		l.wantBalanced(t, url+" (the Node's address)", askHTTP(l.topo.Client, url))
		other := fmt.Sprintf("http://%s:%d/", l.topo.Node.PodIPv4, webNodePort)
		answer, err := askHTTP(l.topo.Client, other)()
		if m.relays {
			// The relay holds the NodePort with one socket on every
			// address, which accepts the connection; no portal leads
			// from it to a relay, so nothing answers.
			if err == nil {
				t.Fatalf("%s (not the Node's address) answered %q", other, answer)
			}
			return
		}
		wantRefused(t, other+" (not the Node's address)", answer, err)
	})
}

func TestNodePortAndExternalIP(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		podSide := fmt.Sprintf("http://%s:%d/", l.topo.Node.PodIPv4, webNodePort)
		urls := []string{fmt.Sprintf("http://%s:%d/", nodeIP, webNodePort), "http://" + externalIP + "/"}
		if m.primaryNodePorts {
			// Without --nodeport-addresses this mode serves NodePorts on
			// the Node's address only, as kube-proxy's does.
			answer, err := askHTTP(l.topo.Client, podSide)()
			wantRefused(t, podSide+" (not the Node's address, the mode's default)", answer, err)
		} else {
			// Without --nodeport-addresses, every node address serves.
			urls = append(urls, podSide)
		}
		for _, url := range urls {
			l.wantBalanced(t, url+" from the client", askHTTP(l.topo.Client, url))
		}
		switch ln, err := net.Listen("tcp", fmt.Sprintf(":%d", webNodePort)); {
		case m.steered:
			// No socket holds the NodePort: the socket-lookup program
			// hands its traffic to the relay before the kernel looks for
			// one, so another program may bind the port but gets none of
			// it.
			if err != nil {
				t.Fatalf("binding port %d beside socket-lookup portals: %v", webNodePort, err)
			}
			l.wantBalanced(t, "the NodePort with another program bound to its port", askHTTP(l.topo.Client, urls[0]))
			ln.Close()
		case m.relays && err == nil:
			// The relay holds the NodePort with a real socket, so nothing
			// else can take it.
			ln.Close()
			t.Errorf("port %d could be bound by another program; kproxy should hold it", webNodePort)
		case err == nil:
			ln.Close()
		}
	})
}

const hairpinVIP = "198.18.0.15"

// TestHairpinToLocalEndpoint: a pod on the node (backend-1) whose service
// sends it to itself is answered, in every mode, when the services file
// places it on this node: the modes that masquerade hairpin traffic for
// local endpoints only (TestClusterIP leaves them out) do here.
func TestHairpinToLocalEndpoint(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string {
			return docs(nodeDoc, httpService("hairpin", hairpinVIP, ""),
				httpSlice("hairpin", endpoint(backends[0], "node", "")))
		})
		if l == nil {
			return
		}
		pod := l.topo.Backends[0]
		seen := lab.Spread(t, 3, askHTTP(pod, "http://"+hairpinVIP+"/"))
		wantOnly(t, "a service whose only endpoint is the asking pod", seen, pod.Name)
	})
}
