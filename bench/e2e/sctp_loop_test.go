package e2e

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/sctprelay"
)

// SCTP services whose endpoints lead back into kproxy, as in
// TestServiceLoopsAreRefused for TCP: their own cluster IP, their NodePort
// on the node, or each other.
const (
	sctpLoopVIP      = "198.18.200.90"
	sctpLoopNodeVIP  = "198.18.200.91"
	sctpLoopAVIP     = "198.18.200.92"
	sctpLoopBVIP     = "198.18.200.93"
	sctpLoopNodePort = 30091
	sctpLoopPort     = 80
	// sctpLoopStartWait bounds kproxy's start and first sync.
	sctpLoopStartWait = time.Minute
)

// renderSCTPLoops is the SCTP case's services and the looping ones.
func renderSCTPLoops(backends []string) string {
	svc := func(name, spec string) string {
		return serviceDoc(name, fmt.Sprintf("%s, ports: [{name: echo, port: %d, protocol: SCTP%s}]", spec, sctpLoopPort, nodePortOf(name)), "")
	}
	slice := func(name, svc, ip string, port int) string {
		return sliceDoc(name, svc, fmt.Sprintf("{name: echo, port: %d, protocol: SCTP}", port), endpoint(ip, "other", ""))
	}
	return docs(sctpServices(backends),
		svc("sloop", "clusterIP: "+sctpLoopVIP),
		slice("sloop-1", "sloop", sctpLoopVIP, sctpLoopPort),
		svc("snploop", "type: NodePort, clusterIP: "+sctpLoopNodeVIP),
		slice("snploop-1", "snploop", nodeIP, sctpLoopNodePort),
		svc("sloopa", "clusterIP: "+sctpLoopAVIP),
		slice("sloopa-1", "sloopa", sctpLoopBVIP, sctpLoopPort),
		svc("sloopb", "clusterIP: "+sctpLoopBVIP),
		slice("sloopb-1", "sloopb", sctpLoopAVIP, sctpLoopPort),
	)
}

func nodePortOf(name string) string {
	if name == "snploop" {
		return fmt.Sprintf(", nodePort: %d", sctpLoopNodePort)
	}
	return ""
}

// TestSCTPLoopsAreRefused: an SCTP association to a service whose endpoint
// leads back into kproxy fails at once in every userspace portal kind, the
// association that came back is refused as a loop (counted, logged once per
// service port), another SCTP service answers, and kproxy's descriptors
// come back to their level. Runs in the guest kernel (make test-guest).
func TestSCTPLoopsAreRefused(t *testing.T) {
	if ok, err := sctprelay.Supported(); !ok {
		t.Skipf("this kernel has no SCTP sockets (%v); the case runs in the guest kernel: make test-guest", err)
	}
	forModesWithSCTP(t, func(m proxyMode) bool { return m.relays }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderSCTPLoops)
		if l == nil {
			return
		}
		// The guest kernel takes well over the usual wait for the first
		// sync of this many SCTP services.
		l.startKproxyWithin(t, sctpLoopStartWait, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", loopNoFile, loopNoFile), "--"},
			kproxyArgs(m, "--services-file="+l.manifest))
		other := askSCTP(l.topo.Client, fmt.Sprintf("%s:%d", sctpVIP, lab.SCTPEchoPort))
		lab.Eventually(t, "the SCTP cluster IP answering", func() (bool, string) {
			name, err := other()
			return err == nil, fmt.Sprint(name, err)
		})
		pid := l.kproxy.Pid()
		before := openDescriptors(t, pid)
		loops := []struct{ name, addr string }{
			{"a service whose endpoint is its own cluster IP", fmt.Sprintf("%s:%d", sctpLoopVIP, sctpLoopPort)},
			{"a NodePort whose endpoint is that NodePort on the node", fmt.Sprintf("%s:%d", nodeIP, sctpLoopNodePort)},
			{"two services that are each other's endpoint", fmt.Sprintf("%s:%d", sctpLoopAVIP, sctpLoopPort)},
		}
		for _, lp := range loops {
			wantLoopRefused(t, lp.name, lp.addr, func() (string, error) {
				return lab.SCTPAsk(l.topo.Client, netip.MustParseAddrPort(lp.addr), "ping")
			})
		}
		if name, err := other(); err != nil {
			t.Errorf("another SCTP service after the loops were asked: %v", err)
		} else {
			t.Logf("another SCTP service answered from %s", name)
		}
		var final int
		lab.Eventually(t, "kproxy's descriptors back at their level before", func() (bool, string) {
			final = openDescriptors(t, pid)
			return final <= before, fmt.Sprintf("%d descriptors, %d before", final, before)
		})
		t.Logf("kproxy's descriptors: %d before, %d after", before, final)
		if refused := metricSum(t, `kproxy_userspace_rejected_total{protocol="sctp",reason="loop"}`); refused < float64(len(loops)*loopRequests) {
			t.Errorf(`kproxy_userspace_rejected_total{protocol="sctp",reason="loop"} = %v, want at least %d`, refused, len(loops)*loopRequests)
		}
		checkLoggedOncePerServicePort(t, l.kproxy.Log(), "SCTP association from kproxy itself", len(loops))
	})
}
