package portal

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestIntactOnKernel: after each way of reloading a firewall, Intact names
// what is missing, and a full Apply puts everything back.
func TestIntactOnKernel(t *testing.T) {
	reloads := []struct {
		name      string
		commands  [][]string // iptables arguments, run with the backend's binary
		wantWords string     // in Intact's problem
	}{
		{"nothing happened", nil, ""},
		{"nat flushed and chains deleted", [][]string{{"-t", "nat", "-F"}, {"-t", "nat", "-X"}}, "is gone"},
		{"nat flushed, chains left in place", [][]string{{"-t", "nat", "-F"}}, "holds 0 rules"},
		{"one portal chain flushed", [][]string{{"-t", "nat", "-F", ChainPortalsContainer}}, ChainPortalsContainer + " of the nat table holds 0 rules"},
		{"filter flushed: the guard unhooked", [][]string{{"-t", "filter", "-F", "INPUT"}}, "jump from INPUT to " + ChainProxyPorts},
		{"a jump deleted from PREROUTING", [][]string{{"-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment", portalsComment, "-j", ChainPortalsContainer}}, "jump from PREROUTING"},
	}
	for _, be := range kernel.Backends() {
		t.Run(string(be), func(t *testing.T) {
			for _, tc := range reloads {
				t.Run(tc.name, func(t *testing.T) {
					if onKernel(t, be) {
						return
					}
					_, _, proxy := standInRelays(t)
					dns := service("kube-system", "dns", clusterIPs("198.18.0.53"), catalogue.Port("dns", v1.ProtocolUDP, 53, 30053))
					rs, err := Build(ipfamily.IPv4, Node{HostIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1")}}, PortalsFrom(snapshotOf(t, dns), proxy))
					if err != nil {
						t.Fatal(err)
					}
					a, err := NewApplier(Config{Family: ipfamily.IPv4, Backend: be})
					if err != nil {
						t.Fatal(err)
					}
					ctx := context.Background()
					if problem, err := a.Intact(ctx); problem != "" || err != nil {
						t.Fatalf("Intact before any Apply = %q, %v; want nothing to check", problem, err)
					}
					if err := a.Apply(ctx, rs, true); err != nil {
						t.Fatal(err)
					}
					if problem, err := a.Intact(ctx); problem != "" || err != nil {
						t.Fatalf("Intact right after Apply = %q, %v", problem, err)
					}
					for _, args := range tc.commands {
						lab.Run(t, be.Command(ipfamily.IPv4), args...)
					}
					problem, err := a.Intact(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if tc.wantWords == "" && problem != "" || !strings.Contains(problem, tc.wantWords) {
						t.Fatalf("Intact = %q, want a problem with %q", problem, tc.wantWords)
					}
					if err := a.Apply(ctx, rs, true); err != nil {
						t.Fatal(err)
					}
					if problem, err := a.Intact(ctx); problem != "" || err != nil {
						t.Errorf("Intact after the full Apply = %q, %v; want everything back", problem, err)
					}
				})
			}
		})
	}
}
