package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// fakeTables is the kernel Tables on a fakeiptables.Fake; ChainExists asks
// the fake directly.
type fakeTables struct {
	*kernelTables
	fake *fakeiptables.Fake
}

func (t fakeTables) ChainExists(_ context.Context, table rules.Table, chain string) (bool, error) {
	return t.fake.HasChain(string(table), chain), nil
}

func (t fakeTables) ListChain(_ context.Context, table rules.Table, chain string) ([]string, error) {
	return t.fake.Rules(string(table), chain), nil
}

type harness struct {
	fake *fakeiptables.Fake
	mode *Mode
	reg  *prometheus.Registry
	gen  uint64
}

func newHarness(t *testing.T, maxChains int) *harness {
	t.Helper()
	fake := fakeiptables.New(ipfamily.IPv4)
	kt, err := newTables(ipfamily.IPv4, kernel.NFT, fake)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := New(Config{
		Families: []FamilyConfig{{
			Rules:               rules.Config{Family: ipfamily.IPv4, MasqueradeBit: 14, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24")}},
			Tables:              fakeTables{kt, fake},
			MaxChainsPerRestore: maxChains,
		}},
		NodeName: "node",
		Registry: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{fake: fake, mode: m, reg: reg}
}

func (h *harness) sync(t *testing.T, full bool, changed []servicemap.ServicePortName, removed []*servicemap.ServicePort, ports ...*servicemap.ServicePort) error {
	t.Helper()
	return h.syncChanges(&servicemap.ChangeSet{Full: full, Changed: changed, Removed: removed}, ports...)
}

func (h *harness) syncChanges(changes *servicemap.ChangeSet, ports ...*servicemap.ServicePort) error {
	h.gen++
	snap := servicemap.NewSnapshot(h.gen, &servicemap.NodeInfo{Name: "node", Addresses: []netip.Addr{netip.MustParseAddr("198.19.0.1")}}, ports...)
	return h.mode.Sync(context.Background(), snap, changes)
}

func name(svc, port string) servicemap.ServicePortName {
	return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: svc}, Port: port, Protocol: v1.ProtocolTCP}
}

// svc is a ClusterIP service port with ready endpoints 198.19.1.<ep>:8080.
func svc(n servicemap.ServicePortName, vip string, eps ...int) *servicemap.ServicePort {
	sp := &servicemap.ServicePort{Name: n, ClusterIPs: []netip.Addr{netip.MustParseAddr(vip)}, Port: 80}
	for _, e := range eps {
		sp.Endpoints = append(sp.Endpoints, servicemap.Endpoint{
			Addr: netip.MustParseAddr(fmt.Sprintf("198.19.1.%d", e)), Port: 8080, Ready: true, Serving: true, NodeName: "other"})
	}
	return sp
}

// sortedLines makes dumps comparable when only the order of rules in the
// shared chains may differ (partial syncs insert at the top, full syncs
// sort).
func sortedLines(dump string) []string {
	lines := strings.Split(strings.TrimSpace(dump), "\n")
	slices.Sort(lines)
	return lines
}

// fullDump is what a full sync of ports writes into empty tables.
func fullDump(t *testing.T, ports ...*servicemap.ServicePort) string {
	t.Helper()
	h := newHarness(t, 0)
	if err := h.sync(t, true, nil, nil, ports...); err != nil {
		t.Fatalf("reference full sync: %v", err)
	}
	return h.fake.Save("")
}

func TestPartialSyncsMatchFullSyncs(t *testing.T) {
	a, b, c := name("a", "http"), name("b", "http"), name("c", "http")
	type step struct {
		changed []servicemap.ServicePortName
		removed []*servicemap.ServicePort
		ports   []*servicemap.ServicePort
	}
	steps := []step{
		{ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 11, 12), svc(b, "198.18.0.2", 13)}},
		{changed: []servicemap.ServicePortName{a}, ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 11, 12, 13), svc(b, "198.18.0.2", 13)}},
		{changed: []servicemap.ServicePortName{c}, ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 11, 12, 13), svc(b, "198.18.0.2", 13), svc(c, "198.18.0.3")}},
		{changed: []servicemap.ServicePortName{a, c}, ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 12), svc(b, "198.18.0.2", 13), svc(c, "198.18.0.3", 11)}},
		{changed: []servicemap.ServicePortName{b}, removed: []*servicemap.ServicePort{svc(b, "198.18.0.2", 13)}, ports: []*servicemap.ServicePort{svc(a, "198.18.0.1", 12), svc(c, "198.18.0.3", 11)}},
	}
	for _, maxChains := range []int{0, 3} {
		t.Run(fmt.Sprintf("maxChains=%d", maxChains), func(t *testing.T) {
			h := newHarness(t, maxChains)
			for i, st := range steps {
				before := len(h.fake.Restores())
				if err := h.sync(t, i == 0, st.changed, st.removed, st.ports...); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if diff := cmp.Diff(sortedLines(fullDump(t, st.ports...)), sortedLines(h.fake.Save(""))); diff != "" {
					t.Fatalf("step %d: tables differ from a full sync of the same snapshot (-full +got):\n%s", i, diff)
				}
				restores := h.fake.Restores()[before:]
				if i == 0 {
					continue
				}
				if maxChains == 0 && len(restores) != 1 {
					t.Errorf("step %d: partial sync ran %d restores, want 1", i, len(restores))
				}
				for _, r := range restores {
					if strings.Contains(r.Payload, ":KUBE-SERVICES ") {
						t.Errorf("step %d: a partial sync rewrote KUBE-SERVICES:\n%s", i, r.Payload)
					}
				}
			}
		})
	}
}

func TestFullSyncInChunks(t *testing.T) {
	var ports []*servicemap.ServicePort
	for i := range 20 {
		ports = append(ports, svc(name(fmt.Sprintf("s%02d", i), "http"), fmt.Sprintf("198.18.0.%d", i+1), 11, 12, 13))
	}
	h := newHarness(t, 10)
	if err := h.sync(t, true, nil, nil, ports...); err != nil {
		t.Fatal(err)
	}
	if n := len(h.fake.Restores()); n < 8 {
		t.Errorf("a full sync of 80 chains with at most 10 per restore ran %d restores", n)
	}
	for _, r := range h.fake.Restores() {
		if n := strings.Count(r.Payload, "\n:"); n > 10+6 { // the shared chains go together in the last one
			t.Errorf("a restore declared %d chains:\n%s", n, r.Payload)
		}
	}
	if diff := cmp.Diff(fullDump(t, ports...), h.fake.Save("")); diff != "" {
		t.Errorf("chunked full sync differs from a single transaction (-one +chunked):\n%s", diff)
	}
}

func TestFirstSyncRemovesStaleChainsOnly(t *testing.T) {
	h := newHarness(t, 0)
	leftovers := `*nat
:KUBE-SVC-OLDOLDOLDOLDOLD1 - [0:0]
:KUBE-SEP-OLDOLDOLDOLDOLD1 - [0:0]
:USER-CHAIN - [0:0]
-A KUBE-SVC-OLDOLDOLDOLDOLD1 -j KUBE-SEP-OLDOLDOLDOLDOLD1
-A KUBE-SEP-OLDOLDOLDOLDOLD1 -p tcp -m tcp -j DNAT --to-destination 198.19.1.99:80
-A USER-CHAIN -j RETURN
COMMIT
`
	if _, err := h.fake.Run(context.Background(), []byte(leftovers), "iptables-nft-restore", "--noflush"); err != nil {
		t.Fatal(err)
	}
	if err := h.sync(t, true, nil, nil, svc(name("a", "http"), "198.18.0.1", 11)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"KUBE-SVC-OLDOLDOLDOLDOLD1", "KUBE-SEP-OLDOLDOLDOLDOLD1"} {
		if h.fake.HasChain("nat", c) {
			t.Errorf("stale chain %s survived the first full sync", c)
		}
	}
	if !h.fake.HasChain("nat", "USER-CHAIN") {
		t.Error("the first full sync removed a chain kproxy does not own")
	}
}

func TestFailedRestoreKeepsRulesAndForcesFullSync(t *testing.T) {
	h := newHarness(t, 0)
	a, b := name("a", "http"), name("b", "http")
	first := []*servicemap.ServicePort{svc(a, "198.18.0.1", 11), svc(b, "198.18.0.2", 12)}
	if err := h.sync(t, true, nil, nil, first...); err != nil {
		t.Fatal(err)
	}
	good := h.fake.Save("")

	h.fake.FailNextRestore("iptables-nft-restore: line 3 failed\n")
	second := []*servicemap.ServicePort{svc(a, "198.18.0.1", 11, 13), svc(b, "198.18.0.2", 12)}
	err := h.sync(t, false, []servicemap.ServicePortName{a}, nil, second...)
	if err == nil {
		t.Fatal("a failed restore was not reported")
	}
	if !strings.Contains(err.Error(), "line 3") {
		t.Errorf("the error does not name the failing line: %v", err)
	}
	if diff := cmp.Diff(good, h.fake.Save("")); diff != "" {
		t.Errorf("a failed restore changed the tables (-before +after):\n%s", diff)
	}
	failures := testutil.ToFloat64(h.mode.families.List()[0].metrics.Failures)
	if failures != 1 {
		t.Errorf("restore failures metric = %v, want 1", failures)
	}

	// The retry is full, even though the engine passes only the change.
	before := len(h.fake.Restores())
	if err := h.sync(t, false, []servicemap.ServicePortName{a}, nil, second...); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.fake.Restores()[before].Payload, ":KUBE-SERVICES ") {
		t.Error("the sync after a failure was not a full one")
	}
	if diff := cmp.Diff(fullDump(t, second...), h.fake.Save("")); diff != "" {
		t.Errorf("after the retry (-want +got):\n%s", diff)
	}
}

func TestFlushedTablesAreRewritten(t *testing.T) {
	h := newHarness(t, 0)
	a := name("a", "http")
	ports := []*servicemap.ServicePort{svc(a, "198.18.0.1", 11, 12)}
	if err := h.sync(t, true, nil, nil, ports...); err != nil {
		t.Fatal(err)
	}
	want := h.fake.Save("")
	// What an operator's "iptables -t mangle -F; -X" does to the canary.
	if _, err := h.fake.Run(context.Background(), []byte("*mangle\n:KUBE-PROXY-CANARY - [0:0]\n-X KUBE-PROXY-CANARY\nCOMMIT\n"), "iptables-nft-restore", "--noflush"); err != nil {
		t.Fatal(err)
	}
	if err := h.sync(t, false, nil, nil, ports...); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, h.fake.Save("")); diff != "" {
		t.Errorf("after the canary vanished (-want +got):\n%s", diff)
	}
}

func TestRuleCountMetric(t *testing.T) {
	h := newHarness(t, 0)
	if err := h.sync(t, true, nil, nil, svc(name("a", "http"), "198.18.0.1", 11, 12)); err != nil {
		t.Fatal(err)
	}
	nat := 0
	for _, line := range strings.Split(h.fake.Save("nat"), "\n") {
		if strings.HasPrefix(line, "-A KUBE-") {
			nat++
		}
	}
	got := testutil.ToFloat64(h.mode.families.List()[0].metrics.Rules.WithLabelValues("nat", "IPv4"))
	if int(got) != nat {
		t.Errorf("kubeproxy_sync_proxy_rules_iptables_total{table=nat} = %v, the nat table holds %d kproxy rules", got, nat)
	}
}

func TestJumpRulesAddedOnceAndRepaired(t *testing.T) {
	h := newHarness(t, 0)
	ports := []*servicemap.ServicePort{svc(name("a", "http"), "198.18.0.1", 11)}
	jumpCount := func() int {
		n := 0
		for _, chain := range []string{"PREROUTING", "OUTPUT"} {
			for _, r := range h.fake.Rules("nat", chain) {
				if strings.HasSuffix(r, "-j KUBE-SERVICES") {
					n++
				}
			}
		}
		return n
	}
	for i := range 3 { // the first full sync reads the kernel, later ones list the built-in chains
		if err := h.sync(t, true, nil, nil, ports...); err != nil {
			t.Fatal(err)
		}
		if n := jumpCount(); n != 2 {
			t.Fatalf("after full sync %d: %d jumps to KUBE-SERVICES in nat PREROUTING and OUTPUT, want 2", i+1, n)
		}
	}
	del := "*nat\n-D " + strings.TrimPrefix(h.fake.Rules("nat", "PREROUTING")[0], "-A ") + "\nCOMMIT\n"
	if _, err := h.fake.Run(context.Background(), []byte(del), "iptables-nft-restore", "--noflush"); err != nil {
		t.Fatalf("deleting a jump: %v", err)
	}
	if n := jumpCount(); n != 1 {
		t.Fatalf("the jump was not deleted: %d jumps", n)
	}
	if err := h.sync(t, true, nil, nil, ports...); err != nil {
		t.Fatal(err)
	}
	if n := jumpCount(); n != 2 {
		t.Errorf("a deleted jump was not restored by the next full sync: %d jumps", n)
	}
}

func TestNATFlushRepairedByThePeriodicSync(t *testing.T) {
	h := newHarness(t, 0)
	ports := []*servicemap.ServicePort{svc(name("a", "http"), "198.18.0.1", 11, 12)}
	if err := h.sync(t, true, nil, nil, ports...); err != nil {
		t.Fatal(err)
	}
	want := h.fake.Save("")
	// "iptables -t nat -F; iptables -t nat -X": every chain of nat gone.
	var flush strings.Builder
	flush.WriteString("*nat\n")
	for _, line := range strings.Split(h.fake.Save("nat"), "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok {
			flush.WriteString("-F " + strings.Fields(name)[0] + "\n")
		}
	}
	for _, line := range strings.Split(h.fake.Save("nat"), "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok && strings.Fields(name)[1] == "-" {
			flush.WriteString("-X " + strings.Fields(name)[0] + "\n")
		}
	}
	flush.WriteString("COMMIT\n")
	if _, err := h.fake.Run(context.Background(), []byte(flush.String()), "iptables-nft-restore", "--noflush"); err != nil {
		t.Fatalf("flushing nat: %v\n%s", err, flush.String())
	}
	if err := h.syncChanges(&servicemap.ChangeSet{Periodic: true}, ports...); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, h.fake.Save("")); diff != "" {
		t.Errorf("after nat was flushed and a periodic sync ran (-want +got):\n%s", diff)
	}
}
