package portal

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

func newFakeApplier(t *testing.T) (*Applier, *fakeiptables.Fake) {
	t.Helper()
	fake := fakeiptables.New(ipfamily.IPv4)
	a, err := NewApplier(Config{Family: ipfamily.IPv4, Backend: kernel.NFT, Runner: fake})
	if err != nil {
		t.Fatal(err)
	}
	return a, fake
}

func buildV4(t *testing.T, svcs ...*v1.Service) *Ruleset {
	t.Helper()
	snap := snapshotOf(t, svcs...)
	rs, err := Build(ipfamily.IPv4, testNode, PortalsFrom(snap, sequentialProxyPorts(snap, false)))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestApplyWritesChainsAndJumps(t *testing.T) {
	a, fake := newFakeApplier(t)
	web := service("default", "web", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }, catalogue.Port("http", v1.ProtocolTCP, 80, 30080))
	dns := service("kube-system", "dns", clusterIPs("198.18.0.53"), catalogue.Port("dns", v1.ProtocolUDP, 53, 0))
	rs := buildV4(t, web, dns)
	if err := a.Apply(context.Background(), rs, true); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, tbl := range rs.Tables() {
		for _, c := range tbl.Chains {
			var want []string
			for _, r := range tbl.Rules {
				if r.Chain == c {
					want = append(want, r.String())
				}
			}
			if got := fake.Rules(tbl.Name, c); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s/%s holds\n%s\nwant\n%s", tbl.Name, c, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
	for _, j := range Jumps() {
		if ok, err := fake.Exists(j.Table, j.Chain, j.Args...); err != nil || !ok {
			t.Errorf("jump to %s from %s/%s missing (err %v)", j.Args[len(j.Args)-1], j.Table, j.Chain, err)
		}
	}
	if pre := fake.Rules("nat", "PREROUTING"); len(pre) != 2 || !strings.HasSuffix(pre[0], "-j KUBE-PORTALS-CONTAINER") ||
		!strings.HasSuffix(pre[1], "-j KUBE-NODEPORT-CONTAINER") {
		t.Errorf("PREROUTING must enter the portals before the NodePorts:\n%s", strings.Join(pre, "\n"))
	}

	// The service goes away: a partial sync leaves no trace of it and adds
	// no second copy of the jumps.
	if err := a.Apply(context.Background(), buildV4(t, dns), false); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	save := fake.Save("")
	if strings.Contains(save, "default/web") {
		t.Errorf("rules of the removed service remain:\n%s", save)
	}
	if !strings.Contains(save, "kube-system/dns:dns") {
		t.Errorf("rules of the remaining service are gone:\n%s", save)
	}
	if n := strings.Count(save, "-j KUBE-PORTALS-CONTAINER"); n != 1 {
		t.Errorf("%d jumps to KUBE-PORTALS-CONTAINER, want 1:\n%s", n, save)
	}
}

func TestApplyFullSyncRestoresAFlushedJump(t *testing.T) {
	a, fake := newFakeApplier(t)
	rs := buildV4(t, service("default", "web", nil, catalogue.Port("http", v1.ProtocolTCP, 80, 0)))
	if err := a.Apply(context.Background(), rs, true); err != nil {
		t.Fatal(err)
	}
	j := Jumps()[1] // OUTPUT -> KUBE-PORTALS-HOST
	if err := fake.Delete(j.Table, j.Chain, j.Args...); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(context.Background(), rs, false); err != nil {
		t.Fatal(err)
	}
	if ok, _ := fake.Exists(j.Table, j.Chain, j.Args...); ok {
		t.Fatal("a partial sync re-checked the jumps; only full syncs should")
	}
	if err := a.Apply(context.Background(), rs, true); err != nil {
		t.Fatal(err)
	}
	if ok, _ := fake.Exists(j.Table, j.Chain, j.Args...); !ok {
		t.Error("a full sync did not put the flushed OUTPUT jump back")
	}
}

func TestApplyRemovesKubeProxyUserspaceLeftovers(t *testing.T) {
	a, fake := newFakeApplier(t)
	old := "*filter\n:KUBE-NODEPORT-NON-LOCAL - [0:0]\n" +
		`-A INPUT -m comment --comment "Ensure that non-local NodePort traffic can flow" -j KUBE-NODEPORT-NON-LOCAL` + "\n" +
		`-A KUBE-NODEPORT-NON-LOCAL -p tcp -m comment --comment "default/web:http" -m tcp --dport 41234 -m state --state NEW -j ACCEPT` + "\nCOMMIT\n"
	if _, err := fake.Run(context.Background(), []byte(old), "iptables-nft-restore", "--noflush"); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(context.Background(), buildV4(t, service("default", "web", nil, catalogue.Port("http", v1.ProtocolTCP, 80, 0))), true); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if fake.HasChain("filter", "KUBE-NODEPORT-NON-LOCAL") || strings.Contains(fake.Save("filter"), "NON-LOCAL") {
		t.Errorf("kube-proxy's stale chain survived:\n%s", fake.Save("filter"))
	}
}

func TestApplyNamesTheFailingRule(t *testing.T) {
	a, fake := newFakeApplier(t)
	rs := buildV4(t, service("default", "web", nil, catalogue.Port("http", v1.ProtocolTCP, 80, 0)))
	// A rule jumping to a chain nobody declared, as a bug in Build would write.
	bad := Rule{Chain: ChainPortalsHost, Args: []string{"-d", "198.18.0.99/32", "-j", "KUBE-NOWHERE"}}
	rs.NAT.Rules = append(rs.NAT.Rules, bad)
	err := a.Apply(context.Background(), rs, true)
	var re *restore.Error
	if !errors.As(err, &re) {
		t.Fatalf("Apply = %v, want a *restore.Error", err)
	}
	if re.Rule != bad.String() {
		t.Errorf("error names %q, want the bad rule %q (full error: %v)", re.Rule, bad.String(), err)
	}
	if !strings.Contains(err.Error(), "KUBE-NOWHERE") || !strings.Contains(err.Error(), "iptables-nft-restore") {
		t.Errorf("error %q should name the command and the missing chain", err)
	}
	if fake.HasChain("nat", ChainPortalsHost) {
		t.Error("the failed table was partly committed")
	}
}

func TestApplyRejectsMismatchedFamily(t *testing.T) {
	a, _ := newFakeApplier(t)
	rs := &Ruleset{Family: ipfamily.IPv6}
	if err := a.Apply(context.Background(), rs, true); err == nil {
		t.Fatal("an IPv4 applier accepted an IPv6 ruleset")
	}
}
