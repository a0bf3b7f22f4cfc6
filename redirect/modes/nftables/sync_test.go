package nftables

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// node is testkit's node with its addresses, so "primary" resolves.
func node() *servicemap.NodeInfo {
	return &servicemap.NodeInfo{Name: testkit.NodeName, Labels: map[string]string{"topology.kubernetes.io/zone": testkit.Zone},
		Addresses: []netip.Addr{testkit.NodeIP(ipfamily.IPv4), testkit.NodeIP(ipfamily.IPv6)}}
}

func snapshotOf(gen uint64, ports ...*servicemap.ServicePort) *servicemap.Snapshot {
	return servicemap.NewSnapshot(gen, node(), ports...)
}

// nodeState is what a random test varies about the node and the cluster.
type nodeState struct {
	zone         string
	otherIP      bool // the node's addresses are the second pair
	serviceCIDRs bool
}

// snapshotIn is a snapshot in a given node state.
func snapshotIn(gen uint64, ns nodeState, ports ...*servicemap.ServicePort) *servicemap.Snapshot {
	n := node()
	n.Labels["topology.kubernetes.io/zone"] = ns.zone
	if ns.otherIP {
		n.Addresses = []netip.Addr{netip.MustParseAddr("198.19.0.2"), netip.MustParseAddr("fd00:19::2")}
	}
	snap := servicemap.NewSnapshot(gen, n, ports...)
	if ns.serviceCIDRs {
		snap.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("fd00:18::/64")}
	}
	return snap
}

// changesBetween is the change set the service map would hand over.
func changesBetween(a, b *servicemap.Snapshot) *servicemap.ChangeSet {
	cs := &servicemap.ChangeSet{}
	for name, sp := range b.All() {
		if old, ok := a.Get(name); !ok || fmt.Sprint(*old) != fmt.Sprint(*sp) {
			cs.Changed = append(cs.Changed, name)
		}
	}
	for name, sp := range a.All() {
		if _, ok := b.Get(name); !ok {
			cs.Changed = append(cs.Changed, name)
			cs.Removed = append(cs.Removed, sp)
		}
	}
	return cs
}

// randomPort builds service i's port in a random shape; addresses derive
// from i so two services never collide.
func randomPort(r *rand.Rand, i int) *servicemap.ServicePort {
	cip := fmt.Sprintf("198.18.0.%d,fd00:18::%x", 10+i, 10+i)
	var opts []testkit.PortOpt
	if r.IntN(3) == 0 {
		opts = append(opts, testkit.NodePort(uint16(30000+i)))
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testkit.ExternalIPs(fmt.Sprintf("198.18.100.%d", 10+i), fmt.Sprintf("fd00:18:100::%x", 10+i)))
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testkit.LoadBalancerIPs(fmt.Sprintf("198.18.200.%d", 10+i), fmt.Sprintf("fd00:18:200::%x", 10+i)))
		if r.IntN(2) == 0 {
			opts = append(opts, testkit.SourceRanges("198.19.0.0/24", "203.0.113.0/25", "fd00:19::/64"))
		}
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testkit.Affinity(time.Duration(60+r.IntN(3)*60)*time.Second))
	}
	if r.IntN(5) == 0 {
		opts = append(opts, testkit.InternalLocal())
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testkit.ExternalLocal(uint16(32000+i)))
	}
	var eps []servicemap.Endpoint
	for e := range r.IntN(5) {
		var eo []testkit.EPOpt
		switch r.IntN(6) {
		case 0:
			eo = append(eo, testkit.Local)
		case 1:
			eo = append(eo, testkit.Terminating)
		case 2:
			eo = append(eo, testkit.Gone)
		case 3:
			eo = append(eo, testkit.Local, testkit.Terminating)
		case 4:
			eo = append(eo, testkit.ZoneHints([]string{"zone-a", "zone-b"}[r.IntN(2)]))
		}
		// A small address pool: ports of different services share
		// endpoints, and so hairpin elements.
		a := 11 + r.IntN(6)
		eps = append(eps, testkit.EP(fmt.Sprintf("198.19.1.%d:%d", a, 8080+e%2), eo...),
			testkit.EP(fmt.Sprintf("[fd00:19:1::%x]:%d", a, 8080+e%2), eo...))
	}
	opts = append(opts, testkit.Endpoints(dedupe(eps)...))
	return testkit.Port("ns", fmt.Sprintf("svc%d", i), uint16(80+r.IntN(2)), cip, opts...)
}

func dedupe(eps []servicemap.Endpoint) []servicemap.Endpoint {
	seen := map[netip.AddrPort]bool{}
	var out []servicemap.Endpoint
	for _, e := range eps {
		if !seen[e.AddrPort()] {
			seen[e.AddrPort()] = true
			out = append(out, e)
		}
	}
	return out
}

// staleChain matches the dump line of a chain, to drop chains that are
// flushed and wait for deletion (a port's chain is never empty otherwise).
var chainLine = regexp.MustCompile(`^add chain \S+ \S+ (\S+)$`)

// withoutStale drops per-port chains without rules from a dump.
func withoutStale(dump string) string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if m := chainLine.FindStringSubmatch(l); m != nil && strings.Contains(m[1], "/") &&
			!strings.Contains(dump, " "+m[1]+" ") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// canonical sorts a dump's element lines: the order of a set's elements
// means nothing (the kernel lists hash sets in hash order), while rules
// keep theirs.
func canonical(dump string) string {
	var other, elems []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "add element ") {
			elems = append(elems, l)
		} else if l != "" {
			other = append(other, l)
		}
	}
	slices.Sort(elems)
	return strings.Join(append(other, elems...), "\n") + "\n"
}

// fullDump is the table one full sync of snap writes into an empty fake.
func fullDump(t testing.TB, fam ipfamily.Family, snap *servicemap.Snapshot) string {
	t.Helper()
	fake := fakeFor(fam)
	m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: fake})
	mustSync(t, m, snap, full())
	return canonical(fake.Dump())
}

// TestIncrementalEqualsFull is the property that partial syncs are exact:
// after any sequence of random changes, each synced incrementally, the
// table is the one a single full sync of the last snapshot writes (chains
// still waiting for their deferred deletion aside), in both families.
func TestIncrementalEqualsFull(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 15))
			clock := &testClock{t: time.Unix(1000, 0)}
			fakes := map[ipfamily.Family]*knftables.Fake{ipfamily.IPv4: fakeFor(ipfamily.IPv4), ipfamily.IPv6: fakeFor(ipfamily.IPv6)}
			m := newTestMode(t, clock, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: fakes[ipfamily.IPv4], ipfamily.IPv6: fakes[ipfamily.IPv6]})
			const services = 8
			ports := map[int]*servicemap.ServicePort{}
			ns := nodeState{zone: "zone-a"}
			prev := snapshotIn(1, ns)
			mustSync(t, m, prev, full())
			for step := range 25 {
				for range 1 + r.IntN(3) {
					i := r.IntN(services)
					if r.IntN(4) == 0 {
						delete(ports, i)
					} else {
						ports[i] = randomPort(r, i)
					}
				}
				var list []*servicemap.ServicePort
				for _, p := range ports {
					list = append(list, p)
				}
				nodeChanged := false
				switch r.IntN(8) {
				case 0:
					ns.zone, nodeChanged = map[string]string{"zone-a": "zone-b", "zone-b": "zone-a"}[ns.zone], true
				case 1:
					ns.otherIP, nodeChanged = !ns.otherIP, true
				case 2:
					ns.serviceCIDRs, nodeChanged = !ns.serviceCIDRs, true
				}
				snap := snapshotIn(uint64(step+2), ns, list...)
				cs := changesBetween(prev, snap)
				cs.NodeChanged = nodeChanged
				if r.IntN(3) == 0 {
					clock.t = clock.t.Add(2 * time.Second) // stale chains go
				}
				mustSync(t, m, snap, cs)
				for fam, fake := range fakes {
					want := fullDump(t, fam, snap)
					if got := canonical(withoutStale(fake.Dump())); got != want {
						t.Fatalf("step %d, %s: incremental table differs from a full sync's (-full +incremental):\n%s", step, fam, testkit.LineDiff(want, got))
					}
				}
				prev = snap
			}
			// Once the deferred deletions ran, nothing is left over.
			clock.t = clock.t.Add(2 * time.Second)
			mustSync(t, m, prev, &servicemap.ChangeSet{Periodic: true})
			for fam, fake := range fakes {
				if got, want := canonical(fake.Dump()), fullDump(t, fam, prev); got != want {
					t.Fatalf("%s after the stale chains' deletion (-full +incremental):\n%s", fam, testkit.LineDiff(want, got))
				}
			}
		})
	}
}

// failingNFT fails the first transaction with a line containing failOn,
// the way nft does (its error names the standard-input line), and records
// every transaction run.
type failingNFT struct {
	*knftables.Fake
	failOn string
	runs   []string
}

func (f *failingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	text := tx.String()
	f.runs = append(f.runs, text)
	if f.failOn != "" {
		for i, l := range strings.Split(text, "\n") {
			if strings.Contains(l, f.failOn) {
				f.failOn = ""
				return fmt.Errorf("/dev/stdin:%d:1-%d: Error: Could not process rule: No such file or directory\n%s\n^^^^^^", i+1, len(l), l)
			}
		}
	}
	return f.Fake.Run(ctx, tx)
}

// TestFailedTransaction checks that a failed transaction leaves the table
// as it was, is counted in kube-proxy's metric, names the offending line,
// and makes the next sync a full one that catches up.
func TestFailedTransaction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failOn string // a text only the second sync's transaction holds
		change func(*servicemap.ServicePort)
	}{
		{"partial-endpoint-change", "198.19.1.99 . 8080", func(sp *servicemap.ServicePort) {
			sp.Endpoints = append(sp.Endpoints, testkit.EP("198.19.1.99:8080"))
		}},
		{"partial-new-nodeport", "tcp . 30099", func(sp *servicemap.ServicePort) { sp.NodePort = 30099 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &failingNFT{Fake: fakeFor(ipfamily.IPv4)}
			reg := prometheus.NewRegistry()
			m, err := New(Config{
				Families: []FamilyConfig{{Rules: testRulesConfig(ipfamily.IPv4), NFT: fake}},
				NodeName: testkit.NodeName, NodePorts: testPolicy(), LocalAddresses: localAddrs, Registry: reg, Logger: klog.Background(),
			})
			if err != nil {
				t.Fatal(err)
			}
			before := testkit.Port("ns", "web", 80, "198.18.0.10", testkit.ThreeEndpoints())
			first := snapshotOf(1, before)
			mustSync(t, m, first, full())
			dumpBefore := fake.Dump()

			after := *before
			tc.change(&after)
			second := snapshotOf(2, &after)
			fake.failOn = tc.failOn
			err = m.Sync(context.Background(), second, changesBetween(first, second))
			if err == nil {
				t.Fatal("Sync succeeded; the transaction should have failed")
			}
			if !strings.Contains(err.Error(), "failed at line ") || !strings.Contains(err.Error(), tc.failOn) {
				t.Errorf("error does not name the offending line: %v", err)
			}
			if got := fake.Dump(); got != dumpBefore {
				t.Errorf("a failed transaction changed the table:\n%s", testkit.LineDiff(dumpBefore, got))
			}
			if n := testutil.ToFloat64(m.families.List()[0].metrics.syncFailures.WithLabelValues("IPv4")); n != 1 {
				t.Errorf("kubeproxy_sync_proxy_rules_nftables_sync_failures_total = %v, want 1", n)
			}
			// The engine retries with the changes merged; even with none,
			// the next sync must be full.
			mustSync(t, m, second, &servicemap.ChangeSet{})
			last := fake.runs[len(fake.runs)-1]
			if !strings.Contains(last, "add table ip kube-proxy") {
				t.Errorf("the sync after a failure was not full:\n%s", last)
			}
			if got, want := canonical(fake.Dump()), fullDump(t, ipfamily.IPv4, second); got != want {
				t.Errorf("after the full sync (-want +got):\n%s", testkit.LineDiff(want, got))
			}
		})
	}
}

// TestPartialSyncTouchesOnlyTheChange checks that one endpoint change
// writes the service's chain and nothing else: no shared object, no other
// service.
func TestPartialSyncTouchesOnlyTheChange(t *testing.T) {
	fake := &failingNFT{Fake: fakeFor(ipfamily.IPv4)}
	m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: fake})
	a := testkit.Port("ns", "a", 80, "198.18.0.10", testkit.ThreeEndpoints())
	b := testkit.Port("ns", "b", 80, "198.18.0.11", testkit.ThreeEndpoints(), testkit.NodePort(30001))
	first := snapshotOf(1, a, b)
	mustSync(t, m, first, full())
	b2 := *b
	b2.Endpoints = b.Endpoints[:2]
	second := snapshotOf(2, a, &b2)
	mustSync(t, m, second, changesBetween(first, second))
	want := "flush chain ip kube-proxy service-F2TLVHMA-ns/b/tcp/http\n" +
		"add chain ip kube-proxy service-F2TLVHMA-ns/b/tcp/http\n" +
		"add rule ip kube-proxy service-F2TLVHMA-ns/b/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.19.1.11 . 8080 , 1 : 198.19.1.12 . 8080 }\n"
	if got := fake.runs[len(fake.runs)-1]; got != want {
		t.Errorf("partial transaction:\n%s\nwant:\n%s", got, want)
	}
}
