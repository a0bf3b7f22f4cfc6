package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/sctprelay"
)

// The SCTP case: a ClusterIP and NodePort service over SCTP in front of the
// backends' SCTP echo servers. This host has no SCTP sockets; the case runs
// in the guest kernel (make test-guest), in every mode: the userspace relay,
// iptables DNAT on the legacy backend, and IPVS.

const (
	sctpVIP      = "198.18.0.40"
	sctpNodePort = 30903
)

func sctpServices(backends []string) string {
	return docs(nodeDoc,
		serviceDoc("assoc", fmt.Sprintf("type: NodePort, clusterIP: %s, ports: [{name: echo, port: %d, protocol: SCTP, nodePort: %d}]",
			sctpVIP, lab.SCTPEchoPort, sctpNodePort), ""),
		sliceDoc("assoc-1", "assoc", fmt.Sprintf("{name: echo, port: %d, protocol: SCTP}", lab.SCTPEchoPort),
			remoteEndpoints(backends, "")...),
	)
}

// askSCTP asks the SCTP echo server behind addr, from h, which backend
// answers, checking the message came back whole.
func askSCTP(h *lab.Host, addr string) func() (string, error) {
	return func() (string, error) {
		const msg = "ping"
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return "", err
		}
		got, err := lab.SCTPAsk(h, ap, msg)
		if err != nil {
			return "", err
		}
		name, echoed, _ := strings.Cut(got, " ")
		if echoed != msg {
			return "", fmt.Errorf("SCTP %s answered %q, want \"<backend> %s\"", addr, got, msg)
		}
		return name, nil
	}
}

func TestSCTP(t *testing.T) {
	if ok, err := sctprelay.Supported(); !ok {
		t.Skipf("this kernel has no SCTP sockets (%v); the case runs in the guest kernel: make test-guest", err)
	}
	forModesWithSCTP(t, func(proxyMode) bool { return true }, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, sctpServices)
		if l == nil {
			return
		}
		for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
			l.wantBalanced(t, "SCTP ClusterIP from "+from.Name, askSCTP(from, fmt.Sprintf("%s:%d", sctpVIP, lab.SCTPEchoPort)))
		}
		l.wantBalanced(t, "SCTP NodePort from the client", askSCTP(l.topo.Client, fmt.Sprintf("%s:%d", nodeIP, sctpNodePort)))
	})
}
