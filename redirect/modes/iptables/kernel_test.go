package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// kernelDump is iptables-save of every table, without the tool's comments.
func kernelDump(t *testing.T, tables *kernelTables) string {
	t.Helper()
	var b strings.Builder
	for _, table := range []rules.Table{rules.Filter, rules.Mangle, rules.NAT} {
		dump, err := tables.Save(context.Background(), table)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(dump, "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String()
}

// TestSyncSequenceOnTheRealKernel runs the partial-sync sequence of
// TestPartialSyncsMatchFullSyncs against the real iptables tools of both
// backends, in a throwaway network namespace, and checks each step leaves
// exactly what the fake holds after a full sync of the same snapshot: the
// -D/-I edits and chain deletions of partial syncs work on real tools.
func TestSyncSequenceOnTheRealKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	a, b, c := name("a", "http"), name("b", "http"), name("c", "http")
	lb := svc(name("lb", "http"), "198.18.0.4", 11, 12)
	lb.NodePort = 30080
	lb.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("198.18.5.1")}
	lb.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("198.19.9.0/24")}
	lb.AffinityTimeout = 10800e9
	steps := []struct {
		changed []servicemap.ServicePortName
		removed []*servicemap.ServicePort
		ports   []*servicemap.ServicePort
	}{
		{ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 11, 12), svc(b, "198.18.0.2", 13), lb}},
		{changed: []servicemap.ServicePortName{a}, ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 11, 12, 13), svc(b, "198.18.0.2", 13), lb}},
		{changed: []servicemap.ServicePortName{c}, ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 11, 12, 13), svc(b, "198.18.0.2", 13), svc(c, "198.18.0.3"), lb}},
		{changed: []servicemap.ServicePortName{a, c}, ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 12), svc(b, "198.18.0.2", 13), svc(c, "198.18.0.3", 11), lb}},
		{changed: []servicemap.ServicePortName{b, lb.Name}, removed: []*servicemap.ServicePort{svc(b, "198.18.0.2", 13), lb},
			ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 12), svc(c, "198.18.0.3", 11)}},
	}
	for _, backend := range []kernel.Backend{kernel.NFT, kernel.Legacy} {
		for _, maxChains := range []int{0, 4} {
			t.Run(fmt.Sprintf("%s/maxChains=%d", backend, maxChains), func(t *testing.T) {
				err := kernel.ThreadSandbox{}.Do(func() {
					tables, err := newTables(ipfamily.IPv4, backend, kernel.ExecRunner{})
					if err != nil {
						t.Error(err)
						return
					}
					m, err := New(Config{Families: []FamilyConfig{{
						Rules:               rules.Config{Family: ipfamily.IPv4, MasqueradeBit: 14, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24")}},
						Tables:              tables,
						MaxChainsPerRestore: maxChains,
					}}, NodeName: "node"})
					if err != nil {
						t.Error(err)
						return
					}
					h := &harness{mode: m}
					for i, st := range steps {
						if err := h.sync(t, i == 0, st.changed, st.removed, st.ports...); err != nil {
							t.Errorf("step %d: %v", i, err)
							return
						}
						want := sortedLines(fullDump(t, st.ports...))
						if diff := cmp.Diff(want, sortedLines(kernelDump(t, tables))); diff != "" {
							t.Errorf("step %d: the kernel's tables differ from a full sync of the same snapshot (-want +kernel):\n%s", i, diff)
							return
						}
					}
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
