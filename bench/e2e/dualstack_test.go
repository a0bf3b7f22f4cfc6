package e2e

import (
	"fmt"
	"net"
	"strconv"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// The dual-stack case: one service with an IPv4 and an IPv6 cluster IP and
// a NodePort, an EndpointSlice per family, on a dual-stack lab.

const (
	dualVIP4     = "198.18.0.60"
	dualVIP6     = "fd00:18::60"
	dualNodePort = 30060
)

func dualStackServices(l *e2eLab) string {
	var v6 []string
	for _, b := range l.topo.Backends {
		v6 = append(v6, b.IPv6.String())
	}
	ports := "{name: http, port: 8080, protocol: TCP}"
	return docs(nodeDoc,
		serviceDoc("dual", fmt.Sprintf("type: NodePort, ipFamilyPolicy: RequireDualStack, ipFamilies: [IPv4, IPv6], "+
			"clusterIP: %[1]s, clusterIPs: [%[1]s, %[2]s], ports: [{name: http, port: 80, targetPort: 8080, nodePort: %[3]d}]",
			dualVIP4, dualVIP6, dualNodePort), ""),
		familySliceDoc("IPv4", "dual-4", "dual", ports, remoteEndpoints(l.backends, "")...),
		familySliceDoc("IPv6", "dual-6", "dual", ports, remoteEndpoints(v6, "")...),
	)
}

func TestDualStack(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := newLabOn(t, m, lab.TopologyOptions{Backends: 3, DualStack: true}, dualStackServices)
		if l == nil {
			return
		}
		l.runKproxy(t, nil)
		url := func(host string, port int) string {
			return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/"
		}
		for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
			l.wantBalanced(t, "IPv4 ClusterIP from "+from.Name, askHTTP(from, url(dualVIP4, 80)))
			l.wantBalanced(t, "IPv6 ClusterIP from "+from.Name, askHTTP(from, url(dualVIP6, 80)))
		}
		l.wantBalanced(t, "IPv4 NodePort from the client", askHTTP(l.topo.Client, url(l.topo.Node.IPv4.String(), dualNodePort)))
		l.wantBalanced(t, "IPv6 NodePort from the client", askHTTP(l.topo.Client, url(l.topo.Node.IPv6.String(), dualNodePort)))
	})
}
