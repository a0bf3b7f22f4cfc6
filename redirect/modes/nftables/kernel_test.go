package nftables

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

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

// TestKernelRepairsFlushedTable checks that a periodic sync notices a table
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
				lab.Run(t, "nft", how, "table", nftFamily(fam), TableName)
				mustSync(t, m, snap, &servicemap.ChangeSet{Periodic: true})
				compareWithFake(t, fam, fake)
			})
		}
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
	return nft
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
