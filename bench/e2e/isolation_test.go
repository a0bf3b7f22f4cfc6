package e2e

import (
	"fmt"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// A service whose addresses a local user tries to take (socket-lookup
// portals): a TCP and a UDP port on one cluster IP, a LoadBalancer IP and
// NodePorts, all on a port an unprivileged user may bind.
const (
	isoVIP      = "198.18.0.71"
	isoLBIP     = "198.18.6.71"
	isoPort     = 5000
	isoNodePort = 30571
	// isoNodeListenerPort is a node program's port on every address.
	isoNodeListenerPort = 2222
)

func renderIsolation(withService bool) func(backends []string) string {
	return func(backends []string) string {
		parts := []string{nodeDoc, httpService("web", webVIP, ""), httpSlice("web", remoteEndpoints(backends, "")...)}
		if withService {
			parts = append(parts,
				serviceDoc("iso", fmt.Sprintf("type: LoadBalancer, clusterIP: %s, ports: [{name: http, port: %d, targetPort: 8080, nodePort: %d}, {name: dns, port: %d, protocol: UDP, targetPort: 9000, nodePort: %d}]",
					isoVIP, isoPort, isoNodePort, isoPort, isoNodePort), "loadBalancer: {ingress: [{ip: "+isoLBIP+"}]}"),
				sliceDoc("iso-1", "iso", "{name: http, port: 8080, protocol: TCP}, {name: dns, port: 9000, protocol: UDP}", remoteEndpoints(backends, "")...))
		}
		return docs(parts...)
	}
}

// TestServiceAddressesAreIsolated: with socket-lookup portals no socket of
// a local user takes a service's traffic, whether bound before kproxy
// started (on the wildcard address) or while the service was away (on the
// service address, with IP_FREEBIND); and a service address answers only on
// its service ports: a node program on every address, and kproxy's own
// health port, are refused there.
func TestServiceAddressesAreIsolated(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.steered }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderIsolation(true))
		if l == nil {
			return
		}
		client := l.topo.Client
		squatter := l.startHijacker(t, "", isoPort, isoPort)
		nodeListener := l.startHijacker(t, "", isoNodeListenerPort)
		defer nodeListener.Stop()
		l.runKproxy(t, nil)

		wantServed := func(when string) {
			t.Helper()
			for _, addr := range []string{fmt.Sprintf("%s:%d", isoVIP, isoPort), fmt.Sprintf("%s:%d", isoLBIP, isoPort), fmt.Sprintf("%s:%d", nodeIP, isoNodePort)} {
				lab.Eventually(t, "TCP to "+addr+" served "+when, func() (bool, string) {
					answer, err := askHTTP(client, "http://"+addr+"/")()
					return err == nil && l.isBackend(answer), fmt.Sprintf("%q, %v", answer, err)
				})
				ask := echoBackend(addr, func(msg string) (string, error) { return lab.UDPAsk(client, addr, msg) })
				lab.Eventually(t, "UDP to "+addr+" served "+when, func() (bool, string) {
					answer, err := ask()
					return err == nil && l.isBackend(answer), fmt.Sprintf("%q, %v", answer, err)
				})
			}
		}
		wantServed("with a squatter on the wildcard address since before kproxy started")
		if got, err := lab.UDPAsk(l.topo.Node, fmt.Sprintf("127.0.0.1:%d", isoPort), "ping"); got != hijackAnswer {
			t.Fatalf("the squatter does not answer on its own: %q, %v", got, err)
		}
		squatter.Stop()

		// A node program answers on the node's address, and on no service
		// address; nor does kproxy's health port.
		if got, err := tcpFirstLine(client, fmt.Sprintf("%s:%d", nodeIP, isoNodeListenerPort)); got != hijackAnswer {
			t.Fatalf("the node program does not answer on the node's address: %q, %v", got, err)
		}
		for _, addr := range []string{isoVIP, isoLBIP, webVIP} {
			for _, port := range []int{isoNodeListenerPort, 10256} {
				dialRefused(t, client, "a node listener through a service address", fmt.Sprintf("%s:%d", addr, port))
			}
			if got, err := lab.UDPAsk(client, fmt.Sprintf("%s:%d", addr, isoNodeListenerPort+1), "ping"); err == nil {
				t.Errorf("UDP to %s:%d, a port no service has, was answered: %q", addr, isoNodeListenerPort+1, got)
			}
		}

		// The service goes away; a local user binds its address and port
		// with IP_FREEBIND; the service comes back.
		l.write(t, renderIsolation(false)(l.backends))
		lab.Eventually(t, "the service withdrawn", func() (bool, string) {
			ok, state := l.programs(t, isoVIP)
			return !ok, state
		})
		squatter = l.startHijacker(t, isoVIP, isoPort, isoPort)
		defer squatter.Stop()
		l.write(t, renderIsolation(true)(l.backends))
		wantServed("with a squatter on the service address bound while it was away")
	})
}
