package nftables

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestKernelMatchesFake syncs every catalogue scenario, IPv4 and IPv6,
// into the real kernel with the real nft (in a fresh network namespace),
// and into the knftables fake; the fake's dump is then loaded with nft on
// its own, and both tables, as `nft list table` prints them, must match
// after normalisation (object blocks sorted, set elements sorted). The
// fake, which every other test uses, thus behaves as nft does.
func TestKernelMatchesFake(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for _, sc := range catalogue.All() {
		snap := sc.Snapshot()
		for _, fam := range catalogue.Families(snap) {
			t.Run(sc.Name+"/"+string(fam), func(t *testing.T) {
				real := realNFT(t, fam)
				fake := fakeFor(fam)
				m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: real})
				mf := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: fake})
				mustSync(t, m, snap, full())
				mustSync(t, mf, snap, full())
				compareWithFake(t, fam, fake)
			})
		}
	}
}

// TestKernelRepairsFlushedTable checks that the next sync notices a table
// flushed (chains left, rules gone) or deleted by someone else, and
// restores it in that sync.
func TestKernelRepairsFlushedTable(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for _, how := range []string{"flush", "delete"} {
		for _, fam := range ipfamily.All() {
			t.Run(how+"/"+string(fam), func(t *testing.T) {
				sc := scenarioNamed(t, "dual-stack")
				snap := sc.Snapshot()
				real := realNFT(t, fam)
				fake := fakeFor(fam)
				m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: real})
				mf := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: fake})
				mustSync(t, m, snap, full())
				mustSync(t, mf, snap, full())
				l := NewNetlinkLister(fam, TableName)
				if n, err := l.RuleCount(context.Background(), "reject-chain"); err != nil || n != 1 {
					t.Fatalf("RuleCount(reject-chain) = %d, %v on an intact table; want 1", n, err)
				}
				lab.Run(t, "nft", how, "table", nftFamily(fam), TableName)
				want := map[string]int{"flush": 0, "delete": -1}[how]
				if n, err := l.RuleCount(context.Background(), "reject-chain"); err != nil || n != want {
					t.Fatalf("RuleCount(reject-chain) = %d, %v after %s; want %d", n, err, how, want)
				}
				mustSync(t, m, snap, &servicemap.ChangeSet{})
				compareWithFake(t, fam, fake)
			})
		}
	}
}

// TestKernelIncremental runs random sequences of changes (as
// TestIncrementalEqualsFull does) into the real kernel, partial syncs going
// over netlink where they can, and into the fake; after every step the
// kernel's table must equal the fake's dump loaded by nft. This checks the
// netlink encoding against nft's, as `nft list table` prints both.
func TestKernelIncremental(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 15))
			clock := &testClock{t: time.Unix(1000, 0)}
			reals := map[ipfamily.Family]knftables.Interface{}
			fakes := map[ipfamily.Family]knftables.Interface{}
			for _, fam := range ipfamily.All() {
				reals[fam], fakes[fam] = realNFT(t, fam), fakeFor(fam)
			}
			m := newTestMode(t, clock, reals)
			mf := newTestMode(t, clock, fakes)
			ports := map[int]*servicemap.ServicePort{}
			ns := nodeState{zone: "zone-a"}
			prev := snapshotIn(1, ns)
			mustSync(t, m, prev, full())
			mustSync(t, mf, prev, full())
			for step := range 12 {
				for range 1 + r.IntN(3) {
					i := r.IntN(6)
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
				snap := snapshotIn(uint64(step+2), ns, list...)
				cs := changesBetween(prev, snap)
				if r.IntN(3) == 0 {
					clock.t = clock.t.Add(2 * time.Second)
				}
				mustSync(t, m, snap, cs)
				mustSync(t, mf, snap, cs)
				for _, fam := range ipfamily.All() {
					compareKeeping(t, fam, fakes[fam].(*knftables.Fake), fmt.Sprintf("step %d", step))
				}
				prev = snap
			}
			sent := 0
			for _, f := range m.families.List() {
				sent += f.fast.sent
			}
			if sent == 0 {
				t.Error("no partial sync went over netlink")
			}
		})
	}
}

// compareKeeping compares the kernel's table with the fake's dump, loaded
// by nft into a second table, leaving the first in place.
func compareKeeping(t testing.TB, fam ipfamily.Family, fake *knftables.Fake, what string) {
	t.Helper()
	got := listTable(t, fam)
	const ref = "kproxy-ref"
	_ = exec.Command("nft", "delete", "table", nftFamily(fam), ref).Run()
	dump := strings.ReplaceAll(fake.Dump(), " "+nftFamily(fam)+" "+TableName+" ", " "+nftFamily(fam)+" "+ref+" ")
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(dump)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: loading the fake's dump: %v\n%s", what, err, out)
	}
	out, err := exec.Command("nft", "list", "table", nftFamily(fam), ref).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table: %v\n%s", err, out)
	}
	want := NormalizeListing(strings.Replace(string(out), "table "+nftFamily(fam)+" "+ref+" {", "table "+nftFamily(fam)+" "+TableName+" {", 1))
	lab.Run(t, "nft", "delete", "table", nftFamily(fam), ref)
	if got != want {
		t.Fatalf("%s, %s: the kernel's table differs from the fake's (-fake +kernel):\n%s", what, fam, testkit.LineDiff(want, got))
	}
}

// TestKernelFailedTransaction makes the kernel refuse a partial sync (an
// element of service-ips replaced behind the mode's back by one the sync
// adds with another verdict; the counts stay, so the check before the sync
// does not see it), over netlink and through nft: the error names the
// refused operation, the table keeps its previous rules (the kernel's
// batches are atomic), and the next sync is a full one that repairs
// everything.
func TestKernelFailedTransaction(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for _, viaNetlink := range []bool{true, false} {
		t.Run(fmt.Sprintf("netlink=%v", viaNetlink), func(t *testing.T) {
			fam := ipfamily.IPv4
			real := realNFT(t, fam).(realIface)
			real.netlink = viaNetlink
			fake := fakeFor(fam)
			m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: real})
			mf := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: fake})
			a := testkit.Port("ns", "a", 80, "198.18.0.10", testkit.ThreeEndpoints())
			first := snapshotOf(1, a)
			mustSync(t, m, first, full())
			mustSync(t, mf, first, full())
			lab.Run(t, "nft", "delete", "element", "ip", TableName, "service-ips", "{ 198.18.0.10 . tcp . 80 }")
			lab.Run(t, "nft", "add", "element", "ip", TableName, "service-ips", "{ 198.18.0.11 . tcp . 80 : drop }")
			before := listTable(t, fam)

			b := testkit.Port("ns", "b", 80, "198.18.0.11", testkit.ThreeEndpoints())
			second := snapshotOf(2, a, b)
			err := m.Sync(context.Background(), second, changesBetween(first, second))
			if err == nil {
				t.Fatal("Sync succeeded without its service-ips map")
			}
			t.Logf("the refused sync: %v", err)
			if !strings.Contains(err.Error(), "service-ips") {
				t.Errorf("the error does not name the refused operation: %v", err)
			}
			if after := listTable(t, fam); after != before {
				t.Errorf("a refused transaction changed the table:\n%s", testkit.LineDiff(before, after))
			}
			mustSync(t, m, second, &servicemap.ChangeSet{})
			mustSync(t, mf, second, full())
			compareKeeping(t, fam, fake, "after the repair")
		})
	}
}

// TestKernelNetlinkLister checks the netlink lister's names against nft's.
func TestKernelNetlinkLister(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for _, fam := range ipfamily.All() {
		t.Run(string(fam), func(t *testing.T) {
			real := realNFT(t, fam)
			m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: real})
			mustSync(t, m, scenarioNamed(t, "session-affinity-clientip").Snapshot(), full())
			chains, sets, err := NewNetlinkLister(fam, TableName).Names(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			wantChains, wantSets, err := knftLister{real}.Names(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(chains)
			slices.Sort(sets)
			slices.Sort(wantChains)
			slices.Sort(wantSets)
			if !slices.Equal(chains, wantChains) || !slices.Equal(sets, wantSets) {
				t.Errorf("netlink lists chains %q sets %q; nft lists chains %q sets %q", chains, sets, wantChains, wantSets)
			}
			if len(sets) < 3 {
				t.Errorf("too few sets listed: %q", sets)
			}
		})
	}
}

func scenarioNamed(t testing.TB, name string) catalogue.Scenario {
	t.Helper()
	for _, sc := range catalogue.All() {
		if sc.Name == name {
			return sc
		}
	}
	t.Fatalf("no scenario %q", name)
	return catalogue.Scenario{}
}

func nftFamily(fam ipfamily.Family) string {
	if fam == ipfamily.IPv6 {
		return "ip6"
	}
	return "ip"
}

// realNFT returns the real nft for fam's table, deleting what an earlier
// case left.
func realNFT(t testing.TB, fam ipfamily.Family) knftables.Interface {
	t.Helper()
	_ = exec.Command("nft", "delete", "table", nftFamily(fam), TableName).Run()
	nf := knftables.IPv4Family
	if fam == ipfamily.IPv6 {
		nf = knftables.IPv6Family
	}
	nft, err := knftables.New(nf, TableName)
	if err != nil {
		t.Fatalf("knftables.New: %v", err)
	}
	return realIface{Interface: nft, netlink: true}
}

// realIface marks the real nft, so that newTestMode gives it the netlink
// lister, as build does.
type realIface struct {
	knftables.Interface
	netlink bool // partial syncs over netlink
}

// compareWithFake lists the kernel's table, then replaces it with the
// fake's dump loaded by nft, lists again and compares the two.
func compareWithFake(t testing.TB, fam ipfamily.Family, fake *knftables.Fake) {
	t.Helper()
	got := listTable(t, fam)
	lab.Run(t, "nft", "delete", "table", nftFamily(fam), TableName)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(fake.Dump())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("loading the fake's dump: %v\n%s\n%s", err, out, fake.Dump())
	}
	want := listTable(t, fam)
	if got != want {
		t.Errorf("the kernel's table differs from the fake's (-fake +kernel):\n%s", testkit.LineDiff(want, got))
	}
}

func listTable(t testing.TB, fam ipfamily.Family) string {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), "nft", "list", "table", nftFamily(fam), TableName).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table: %v\n%s", err, out)
	}
	return NormalizeListing(string(out))
}

// NormalizeListing makes two `nft list table` outputs of the same content
// compare equal: object blocks sorted by their header, set and map
// elements one per line and sorted (the kernel lists hash sets in hash
// order), rule order within a chain kept.
func NormalizeListing(s string) string {
	lines := strings.Split(s, "\n")
	var head []string
	var blocks []string
	var cur []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "\t\t") && strings.HasSuffix(l, "{"):
			cur = []string{l}
		case l == "\t}":
			cur = append(cur, l)
			blocks = append(blocks, strings.Join(cur, "\n"))
			cur = nil
		case cur != nil && strings.HasPrefix(strings.TrimSpace(l), "elements = {"):
			text := strings.TrimSpace(l)
			for !strings.HasSuffix(text, "}") && i+1 < len(lines) {
				i++
				text += " " + strings.TrimSpace(lines[i])
			}
			text = strings.TrimSuffix(strings.TrimPrefix(text, "elements = {"), "}")
			var items []string
			for _, it := range strings.Split(text, ",") {
				if it = strings.TrimSpace(it); it != "" {
					items = append(items, "\t\telement "+it)
				}
			}
			slices.Sort(items)
			cur = append(cur, items...)
		case cur != nil:
			if strings.TrimSpace(l) != "" {
				cur = append(cur, l)
			}
		case strings.TrimSpace(l) != "":
			head = append(head, l)
		}
	}
	slices.Sort(blocks)
	return strings.Join(head, "\n") + "\n" + strings.Join(blocks, "\n") + "\n"
}

// TestKernelLoadsConfigGoldens loads every configuration golden's tables
// with nft: each rule the configurations produce (interface detectors,
// service CIDRs, masquerade-all, fib NodePorts) is valid nft input.
func TestKernelLoadsConfigGoldens(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	files, _ := filepath.Glob("testdata/config/*.golden")
	if len(files) == 0 {
		t.Fatal("no configuration golden")
	}
	for _, path := range files {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range ipfamily.All() {
			_ = exec.Command("nft", "delete", "table", nftFamily(fam), TableName).Run()
		}
		var lines []string
		for _, l := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(l, "add ") {
				lines = append(lines, l)
			}
		}
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: nft refuses it: %v\n%s", path, err, out)
		}
	}
}

// TestKernelTakeOverAffinity starts a mode on a table a previous process
// left (ClientIP affinity on a service), with the service now without
// affinity: the first full sync must drop the affinity sets the old rules
// used, whose chains it rewrites over netlink after its nft transaction.
func TestKernelTakeOverAffinity(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	fam := ipfamily.IPv4
	sticky := testkit.Port("ns", "web", 80, "198.18.0.10", testkit.ThreeEndpoints(), testkit.Affinity(time.Hour))
	plain := testkit.Port("ns", "web", 80, "198.18.0.10", testkit.ThreeEndpoints())
	before := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: realNFT(t, fam)})
	mustSync(t, before, snapshotOf(1, sticky), full())
	nft, err := knftables.New(knftables.IPv4Family, TableName)
	if err != nil {
		t.Fatal(err)
	}
	after := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: realIface{Interface: nft, netlink: true}})
	mustSync(t, after, snapshotOf(2, plain), full())
	fake := fakeFor(fam)
	mf := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: fake})
	mustSync(t, mf, snapshotOf(2, plain), full())
	if got := listTable(t, fam); strings.Contains(got, "affinity-") {
		t.Errorf("affinity sets left behind:\n%s", got)
	}
	// The old endpoint chains wait, flushed, for their deletion at a sync
	// a second later.
	time.Sleep(staleChainDelay + 100*time.Millisecond)
	mustSync(t, after, snapshotOf(2, plain), &servicemap.ChangeSet{})
	compareKeeping(t, fam, fake, "after the takeover")
}
