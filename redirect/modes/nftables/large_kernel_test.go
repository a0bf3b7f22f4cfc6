package nftables

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestKernelLargeAddition adds 2,500 services to 100 in one change, with
// the real nft in a fresh network namespace and a sync budget that lets
// each sync write one chunk: the addition goes over netlink in bounded
// batches (not one nft transaction, whose cost grows with the square of
// its services), a chunk of one batch per sync with the rest left as the
// mode's backlog; an endpoint removal that arrives while the backlog is
// not written lands in the kernel at the next sync, in a batch of its own
// ahead of the backlog; and once the backlog is written the table equals
// the fake's.
func TestKernelLargeAddition(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	const before, added = 100, 2500
	fam := ipfamily.IPv4
	m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: realNFT(t, fam)})
	f := m.families.List()[0]
	f.syncBudget = time.Nanosecond
	all := scalePorts(before + added)
	mustSync(t, m, snapshotOf(1, all[:before]...), full())

	cs := &servicemap.ChangeSet{}
	for _, sp := range all[before:] {
		cs.Changed = append(cs.Changed, sp.Name)
	}
	sent := f.fast.sent
	mustSync(t, m, snapshotOf(2, all...), cs)
	if got, want := m.Backlog(), added-portsPerChunk; got != want {
		t.Fatalf("backlog %d after the first sync of %d new services; want %d (one chunk written)", got, added, want)
	}
	if n := f.fast.sent - sent; n != 1 {
		t.Errorf("the first chunk of %d services went in %d netlink batches; want one", portsPerChunk, n)
	}

	// Service 7 loses its last endpoint while the backlog waits.
	removed := all[7].Endpoints[len(all[7].Endpoints)-1]
	shrunk := *all[7]
	shrunk.Endpoints = slices.Clone(all[7].Endpoints[:len(all[7].Endpoints)-1])
	next := slices.Clone(all)
	next[7] = &shrunk
	var writes [][]servicemap.ServicePortName
	f.wrote = func(names []servicemap.ServicePortName) { writes = append(writes, slices.Clone(names)) }
	backlog, sent := m.Backlog(), f.fast.sent
	mustSync(t, m, snapshotOf(3, next...), &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{shrunk.Name}})
	f.wrote = nil
	switch {
	case len(writes) == 0:
		t.Error("the sync carrying the removal wrote nothing")
	case !slices.Equal(writes[0], []servicemap.ServicePortName{shrunk.Name}):
		t.Errorf("the sync carrying the removal first wrote %d service ports (service 7 among them: %v); want service 7 alone",
			len(writes[0]), slices.Contains(writes[0], shrunk.Name))
	}
	if got := m.Backlog(); got != backlog {
		t.Errorf("backlog %d after the sync carrying the removal, %d before; want the budget to stop it after the removal's own write", got, backlog)
	}
	if n := f.fast.sent - sent; n != 1 {
		t.Errorf("the removal went in %d netlink batches; want one", n)
	}
	if table := listTable(t, fam); strings.Contains(table, removed.Addr.String()+" . ") {
		t.Errorf("the removed endpoint %s is still in the kernel after the sync that carried its removal", removed.Addr)
	}
	for i := 0; m.Backlog() > 0; i++ {
		if i > added/portsPerChunk+1 {
			t.Fatalf("the backlog is not drained: %d left", m.Backlog())
		}
		mustSync(t, m, snapshotOf(uint64(4+i), next...), &servicemap.ChangeSet{})
	}
	fake := fakeFor(fam)
	mf := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: fake})
	mustSync(t, mf, snapshotOf(3, next...), full())
	compareKeeping(t, fam, fake, fmt.Sprintf("after adding %d services", added))
}
