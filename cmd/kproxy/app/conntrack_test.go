package app

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/sync/sysctl"
)

const udpService = `apiVersion: v1
kind: Service
metadata: {name: dns, namespace: kube-system}
spec:
  clusterIP: 198.18.0.53
  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 9000}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-1
  namespace: kube-system
  labels: {kubernetes.io/service-name: dns}
addressType: IPv4
ports: [{name: dns, port: 9000, protocol: UDP}]
endpoints:
- addresses: [198.19.1.11]
`

// dnsFlows are flows to the dns service as different pasts would have
// left them.
type dnsFlows struct{ natToEndpoint, natToGoneBackend, untranslated, tcpToGoneBackend conntrack.Flow }

func pastFlows() dnsFlows {
	return dnsFlows{
		natToEndpoint:    ctFlow(conntrack.UDP, "198.19.0.2:40001", "198.18.0.53:53", "198.19.1.11:9000"),
		natToGoneBackend: ctFlow(conntrack.UDP, "198.19.0.2:40002", "198.18.0.53:53", "198.19.1.99:9000"),
		untranslated:     ctFlow(conntrack.UDP, "198.19.0.2:40003", "198.18.0.53:53", "198.18.0.53:53"),
		tcpToGoneBackend: ctFlow(conntrack.TCP, "198.19.0.2:40004", "198.18.0.53:53", "198.19.1.99:9000"),
	}
}

func ctFlow(proto conntrack.Protocol, src, dst, reply string) conntrack.Flow {
	return conntrack.Flow{Protocol: proto, OrigSrc: netip.MustParseAddrPort(src),
		OrigDst: netip.MustParseAddrPort(dst), ReplySrc: netip.MustParseAddrPort(reply)}
}

// TestRunCleansConntrackAtStart checks the wiring: at its first sync each
// mode reconciles the conntrack table by its own idea of a healthy flow.
func TestRunCleansConntrackAtStart(t *testing.T) {
	past := pastFlows()
	tests := []struct {
		mode string
		want []conntrack.Flow // the flows left
	}{
		{"iptables", []conntrack.Flow{past.natToEndpoint, past.tcpToGoneBackend}},
		// The userspace mode answers from its relays: a flow translated to
		// an endpoint was left by kernel NAT, and goes too.
		{"userspace", []conntrack.Flow{past.tcpToGoneBackend}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			if lab.InFreshNetns(t) {
				return
			}
			lab.AddNodeLink(t, "198.19.0.1/24")
			h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			for _, f := range []conntrack.Flow{past.natToEndpoint, past.natToGoneBackend, past.untranslated, past.tcpToGoneBackend} {
				if err := h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, netlinkFlow(f)); err != nil {
					t.Fatalf("creating %v: %v", f, err)
				}
			}
			runOn(t, udpService, "--proxy-mode="+tt.mode, "--conntrack-max-per-core=0")
			lab.Eventually(t, "the first conntrack cleanup", func() (bool, string) {
				v, ok := lab.Metric("kproxy_conntrack_cleanup_duration_seconds_count")
				return ok && v != "0", v
			})
			flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for _, f := range flows {
				if flow := conntrack.FlowOf(f); flow.OrigDst.Addr() == past.natToEndpoint.OrigDst.Addr() {
					got = append(got, flow.String()) // not the test's own scrapes of /metrics
				}
			}
			for _, f := range tt.want {
				want = append(want, f.String())
			}
			slices.Sort(got)
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("flows left (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunTunesConntrack(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	// Defaults for the table size, which a namespace cannot change, and
	// the TCP timeouts, which it can; a UDP timeout on top.
	logs := runOn(t, udpService, "--conntrack-udp-timeout=45s")
	for name, want := range map[string]string{
		conntrack.TCPEstablishedTimeoutSysctl: "86400",
		conntrack.TCPCloseWaitTimeoutSysctl:   "3600",
		conntrack.UDPTimeoutSysctl:            "45",
	} {
		if got, err := (sysctl.Proc{}).Read(name); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %s", name, got, err, want)
		}
	}
	if n := strings.Count(logs.String(), "some conntrack settings could not be applied"); n != 1 {
		t.Errorf("%d warnings about conntrack settings, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "nf_conntrack_max") {
		t.Errorf("the warning does not name nf_conntrack_max:\n%s", logs)
	}
}

// runOn runs kproxy on a services file holding manifest, with args, until
// the test ends, and returns once it has synced.
func runOn(t *testing.T, manifest string, args ...string) *logBuffer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config(t, append([]string{"--services-file=" + path, "--iptables-min-sync-period=0"}, args...)...)
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	lab.Eventually(t, "the first sync", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("Run stopped: %v\n%s", err, logs)
		default:
		}
		v, ok := lab.Metric(lab.SyncCountMetric)
		return ok && v != "0", v
	})
	return logs
}

// netlinkFlow is f as DNAT leaves it, for ConntrackCreate.
func netlinkFlow(f conntrack.Flow) *netlink.ConntrackFlow {
	ct := &netlink.ConntrackFlow{
		FamilyType: unix.AF_INET,
		Forward: netlink.IPTuple{Protocol: uint8(f.Protocol),
			SrcIP: net.IP(f.OrigSrc.Addr().AsSlice()), SrcPort: f.OrigSrc.Port(),
			DstIP: net.IP(f.OrigDst.Addr().AsSlice()), DstPort: f.OrigDst.Port()},
		Reverse: netlink.IPTuple{Protocol: uint8(f.Protocol),
			SrcIP: net.IP(f.ReplySrc.Addr().AsSlice()), SrcPort: f.ReplySrc.Port(),
			DstIP: net.IP(f.OrigSrc.Addr().AsSlice()), DstPort: f.OrigSrc.Port()},
		TimeOut: 600,
	}
	if f.Protocol == conntrack.TCP {
		ct.ProtoInfo = &netlink.ProtoInfoTCP{State: 3} // ESTABLISHED
	}
	return ct
}
