package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/replyroute"
)

// Services for the client-address case: src-local's only endpoint
// (backend-2) runs on this node, src-remote's (backend-3) on another.
const (
	srcLocalVIP       = "198.18.0.120"
	srcRemoteVIP      = "198.18.0.121"
	srcLocalHTTPNode  = 30093
	srcLocalUDPNode   = 30094
	srcUDPServicePort = 90
)

func clientAddressServices(backends []string) string {
	ports := fmt.Sprintf("ports: [{name: http, port: 80, targetPort: 8080, nodePort: %d}, "+
		"{name: src, port: %d, protocol: UDP, targetPort: %d, nodePort: %d}]",
		srcLocalHTTPNode, srcUDPServicePort, lab.UDPSourcePort, srcLocalUDPNode)
	slicePorts := fmt.Sprintf("{name: http, port: 8080, protocol: TCP}, {name: src, port: %d, protocol: UDP}", lab.UDPSourcePort)
	return docs(nodeDoc,
		serviceDoc("src-local", "type: NodePort, externalTrafficPolicy: Local, clusterIP: "+srcLocalVIP+", "+ports, ""),
		serviceDoc("src-remote", fmt.Sprintf("clusterIP: %s, ports: [{name: http, port: 80, targetPort: 8080}, "+
			"{name: src, port: %d, protocol: UDP, targetPort: %d}]", srcRemoteVIP, srcUDPServicePort, lab.UDPSourcePort), ""),
		sliceDoc("src-local-1", "src-local", slicePorts, endpoint(backends[1], "node", "")),
		sliceDoc("src-remote-1", "src-remote", slicePorts, endpoint(backends[2], "other", "")))
}

// askUDPSource asks the UDP source server behind addr, from d: "<backend>
// <source address it saw>".
func askUDPSource(d lab.Dialer, addr string) func() (string, error) {
	return func() (string, error) { return lab.UDPAsk(d, addr, "?") }
}

// The userspace relays keep the client's address for an endpoint on this
// node, as kube-proxy's DNAT does, through a cluster IP and a NodePort
// with externalTrafficPolicy: Local, over TCP and UDP, whatever the portal
// kind. Where the endpoint's replies would not come back through the node
// (an endpoint on another node) or would pass it by (a client on the
// endpoint's own bridge), the relays dial from the node, as before; and
// connections kproxy did not make, straight to the pod, are untouched.
func TestUserspaceKeepsClientAddress(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.relays }, func(t *testing.T, m proxyMode) {
		// UDP flows (and their reply steering) outlive the checks below;
		// periodic syncs come often enough to see a repair.
		l := startLab(t, m, clientAddressServices, "--udp-timeout=60s", "--iptables-sync-period=2s")
		if l == nil {
			return
		}
		client, pod := l.topo.Client, l.topo.Backends[0]
		node := l.topo.Node.PodIPv4.String()
		nodePort := func(port int) string { return fmt.Sprintf("%s:%d", nodeIP, port) }
		for _, tc := range []struct {
			name string
			from lab.Dialer
			ask  func(lab.Dialer) func() (string, error)
			want string
		}{
			{"TCP through the cluster IP keeps the client's address", client,
				func(d lab.Dialer) func() (string, error) { return askSource(d, "http://"+srcLocalVIP) }, "backend-2 " + clientIP},
			{"TCP through the NodePort (Local policy) keeps the client's address", client,
				func(d lab.Dialer) func() (string, error) { return askSource(d, "http://"+nodePort(srcLocalHTTPNode)) }, "backend-2 " + clientIP},
			{"UDP through the cluster IP keeps the client's address", client,
				func(d lab.Dialer) func() (string, error) {
					return askUDPSource(d, fmt.Sprintf("%s:%d", srcLocalVIP, srcUDPServicePort))
				}, "backend-2 " + clientIP},
			{"UDP through the NodePort (Local policy) keeps the client's address", client,
				func(d lab.Dialer) func() (string, error) { return askUDPSource(d, nodePort(srcLocalUDPNode)) }, "backend-2 " + clientIP},
			{"an endpoint on another node sees the node (TCP)", client,
				func(d lab.Dialer) func() (string, error) { return askSource(d, "http://"+srcRemoteVIP) }, "backend-3 " + node},
			{"an endpoint on another node sees the node (UDP)", client,
				func(d lab.Dialer) func() (string, error) {
					return askUDPSource(d, fmt.Sprintf("%s:%d", srcRemoteVIP, srcUDPServicePort))
				}, "backend-3 " + node},
			{"a pod on the endpoint's bridge is answered through the node's address", pod,
				func(d lab.Dialer) func() (string, error) { return askSource(d, "http://"+srcLocalVIP) }, "backend-2 " + node},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantOnly(t, tc.name, lab.Spread(t, 4, tc.ask(tc.from)), tc.want)
			})
		}

		t.Run("the client's own connections to the pod are untouched", func(t *testing.T) {
			// Kept flows open through the service, TCP (a connection that
			// sends nothing, which nginx holds) and UDP (until it idles
			// out); then the client straight to the same pod and ports.
			held, err := client.Dial("tcp", srcLocalVIP+":80")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			if _, err := askUDPSource(client, fmt.Sprintf("%s:%d", srcLocalVIP, srcUDPServicePort))(); err != nil {
				t.Fatal(err)
			}
			lab.Eventually(t, "the kept flows steered", func() (bool, string) {
				out := lab.Run(t, "ip", "rule", "show")
				return m.name == "userspace" || (strings.Contains(out, "ipproto tcp") && strings.Contains(out, "ipproto udp")), out
			})
			backend := l.backends[1]
			wantOnly(t, "HTTP straight to the pod", lab.Spread(t, 4, askSource(client, "http://"+backend+":8080")), "backend-2 "+clientIP)
			wantOnly(t, "UDP straight to the pod", lab.Spread(t, 4, askUDPSource(client, fmt.Sprintf("%s:%d", backend, lab.UDPSourcePort))),
				"backend-2 "+clientIP)
		})

		t.Run("closed connections leave no rule behind", func(t *testing.T) {
			// TCP connections end with each request (the held one ended
			// above); only UDP flows (until they idle out) may still hold
			// rules, one each.
			lab.Eventually(t, "no TCP reply rule left", func() (bool, string) {
				out := lab.Run(t, "ip", "rule", "show")
				return !strings.Contains(out, "ipproto tcp"), out
			})
		})

		t.Run("a periodic sync puts back the reply steering", func(t *testing.T) {
			lab.Run(t, "ip", "route", "flush", "table", fmt.Sprint(replyroute.Table))
			// REDIRECT portals use the socket match where nftables has the
			// ip family (not in the guest kernel).
			if out, err := l.topo.Node.Exec("nft", "list", "tables"); err == nil && strings.Contains(out, replyroute.NFTable) {
				lab.Run(t, "nft", "delete", "table", "ip", replyroute.NFTable)
			}
			lab.Eventually(t, "the endpoint to see the client's address again", func() (bool, string) {
				got, err := askSource(client, "http://"+srcLocalVIP)()
				return err == nil && got == "backend-2 "+clientIP, fmt.Sprintf("%q %v", got, err)
			})
		})

		t.Run("a stop leaves nothing behind", func(t *testing.T) {
			if err := l.kproxy.Stop(); err != nil {
				t.Logf("stopping kproxy: %v", err)
			}
			if left := replySteeringLeft(t, l.topo.Node); left != "" {
				t.Errorf("after kproxy stopped:\n%s", left)
			}
		})

		t.Run("after a crash, --cleanup removes it", func(t *testing.T) {
			l.runKproxy(t, nil, "--udp-timeout=60s")
			if _, err := askUDPSource(client, fmt.Sprintf("%s:%d", srcLocalVIP, srcUDPServicePort))(); err != nil {
				t.Fatal(err)
			}
			if err := l.kproxy.Kill(); err != nil {
				t.Fatal(err)
			}
			if left := replySteeringLeft(t, l.topo.Node); left == "" {
				t.Fatal("nothing of the reply steering left after a crash with a kept flow open: the check below proves nothing")
			}
			if out, err := l.topo.Node.Exec(l.bin, "--cleanup"); err != nil {
				t.Fatalf("kproxy --cleanup: %v\n%s", err, out)
			}
			if left := replySteeringLeft(t, l.topo.Node); left != "" {
				t.Errorf("after kproxy --cleanup:\n%s", left)
			}
		})
	})
}

// Routed pods: point-to-point pod networks put each pod behind a veth and a
// /32 route, on none of the node's link prefixes.
const (
	routedPodCIDR  = "198.19.16.0/20"
	routedPod      = "198.19.16.5"
	routedPodGW    = "198.19.16.1"
	otherRoutedPod = "198.19.40.5"
	otherRoutedGW  = "198.19.40.1"
)

// A pod of this node keeps its address to an endpoint on another node too,
// whose replies come back through this node, when the pod is routed on a
// veth of its own (no link prefix of the node holds it) and started after
// kproxy's last sync: the node's routes tell it from another node's pod. A
// routed address outside the detector's --cluster-cidr is no pod, and is
// dialled from the node.
func TestUserspaceKeepsRoutedPodAddress(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.relays }, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, clientAddressServices, "--cluster-cidr="+routedPodCIDR)
		if l == nil {
			return
		}
		pod, err := l.topo.AddRoutedPod("ptp", netip.MustParseAddr(routedPod), netip.MustParseAddr(routedPodGW))
		if err != nil {
			t.Fatal(err)
		}
		notPod, err := l.topo.AddRoutedPod("ptp-out", netip.MustParseAddr(otherRoutedPod), netip.MustParseAddr(otherRoutedGW))
		if err != nil {
			t.Fatal(err)
		}
		node := l.topo.Node.PodIPv4.String()
		udp := func(vip string) string { return fmt.Sprintf("%s:%d", vip, srcUDPServicePort) }
		for _, tc := range []struct {
			name string
			ask  func() (string, error)
			want string
		}{
			{"TCP to an endpoint on another node keeps the pod's address", askSource(pod, "http://"+srcRemoteVIP), "backend-3 " + routedPod},
			{"UDP to an endpoint on another node keeps the pod's address", askUDPSource(pod, udp(srcRemoteVIP)), "backend-3 " + routedPod},
			{"TCP to an endpoint on this node keeps the pod's address", askSource(pod, "http://"+srcLocalVIP), "backend-2 " + routedPod},
			{"outside the cluster CIDR, an endpoint on another node sees the node", askSource(notPod, "http://"+srcRemoteVIP), "backend-3 " + node},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantOnly(t, tc.name, lab.Spread(t, 4, tc.ask), tc.want)
			})
		}
	})
}

// replySteeringLeft lists what steers replies to the relays' transparent
// dials on node: policy rules to replyroute.Table, its routes, the socket
// match's nftables tables; "" when there is none. (iproute2 6.1 filters
// rules by protocol only in name, and fails on an absent IPv6 table.)
func replySteeringLeft(t *testing.T, node *lab.Host) string {
	t.Helper()
	var left []string
	for _, fam := range []string{"-4", "-6"} {
		for _, line := range strings.Split(lab.Run(t, "ip", fam, "rule", "show"), "\n") {
			if strings.Contains(line, fmt.Sprintf("lookup %d", replyroute.Table)) {
				left = append(left, "rule: "+line)
			}
		}
		if out, err := node.Exec("ip", fam, "route", "show", "table", fmt.Sprint(replyroute.Table)); err == nil && strings.TrimSpace(out) != "" {
			left = append(left, "routes of table "+fmt.Sprint(replyroute.Table)+": "+strings.TrimSpace(out))
		}
	}
	// Without nf_tables (a guest kernel without netfilter) nft fails:
	// there is no table then.
	if out, err := node.Exec("nft", "list", "tables"); err == nil && strings.Contains(out, replyroute.NFTable) {
		left = append(left, "nftables: "+strings.TrimSpace(out))
	}
	return strings.Join(left, "\n")
}
