package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

const (
	lbOpenVIP      = "198.18.0.40"
	lbRangedVIP    = "198.18.0.41"
	lbOpenIP       = "198.18.6.1"
	lbRangedIP     = "198.18.6.2"
	lbOpenNodePort = 30081
	// outsiderIP is a second address of the client host, outside the
	// ranged service's loadBalancerSourceRanges; the client's own address
	// is inside.
	outsiderIP = "198.19.0.3"
)

// loadBalancerDoc renders a LoadBalancer service whose port "http" targets
// nginx, with one ingress IP and, unless empty, source ranges.
func loadBalancerDoc(name, vip string, nodePort int, ranges, ingress string) string {
	spec := fmt.Sprintf("type: LoadBalancer, clusterIP: %s, ports: [{name: http, port: 80, targetPort: 8080, nodePort: %d}]", vip, nodePort)
	if ranges != "" {
		spec += ", loadBalancerSourceRanges: [" + ranges + "]"
	}
	return serviceDoc(name, spec, "loadBalancer: {ingress: [{ip: "+ingress+"}]}")
}

func TestLoadBalancerIngress(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string {
			eps := remoteEndpoints(backends, "")
			return docs(nodeDoc,
				loadBalancerDoc("lb-open", lbOpenVIP, lbOpenNodePort, "", lbOpenIP),
				loadBalancerDoc("lb-ranged", lbRangedVIP, 30082, "192.0.2.0/24, "+clientIP+"/32", lbRangedIP),
				httpSlice("lb-open", eps...), httpSlice("lb-ranged", eps...))
		})
		if l == nil {
			return
		}
		client := l.topo.Client
		client.MustExec("ip", "addr", "add", outsiderIP+"/24", "dev", "eth0")
		outsider := lab.FromAddress(client, netip.MustParseAddr(outsiderIP))

		for _, tc := range []struct {
			what string
			from lab.Dialer
			url  string
		}{
			{"LoadBalancer ingress IP", client, "http://" + lbOpenIP + "/"},
			{"NodePort of the LoadBalancer service", client, fmt.Sprintf("http://%s:%d/", nodeIP, lbOpenNodePort)},
			{"LoadBalancer ingress IP from inside its source ranges", client, "http://" + lbRangedIP + "/"},
			{"ClusterIP of a ranged service from outside the ranges (they apply to ingress IPs only)", outsider, "http://" + lbRangedVIP + "/"},
		} {
			l.wantBalanced(t, tc.what, askHTTP(tc.from, tc.url))
		}
		const what = "LoadBalancer ingress IP from outside its source ranges"
		switch {
		case m.localPortals:
			// No firewall: the relay resets the connection it accepted,
			// which the client may see at connect or at its first read,
			// and counts it.
			wantReset(t, outsider, what, lbRangedIP+":80")
			lab.Within(t, changeBound, "the refusal counted", func() (bool, string) {
				samples, err := lab.MetricSamples("kproxy_userspace_rejected_total")
				return err == nil && slices.Contains(samples, `kproxy_userspace_rejected_total{protocol="tcp",reason="source_range"} 1`), fmt.Sprint(samples, err)
			})
		case m.relays:
			// The portal firewall rejects, so the client learns at once.
			dialRefused(t, outsider, what, lbRangedIP+":80")
		default:
			// kube-proxy's firewall chain drops.
			wantNotServed(t, outsider, what, lbRangedIP+":80")
		}
	})
}
