package localroute_test

import (
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/localroute"
	"kproxy.dev/kproxy/redirect/localroute/fakeroutes"
	"kproxy.dev/kproxy/sync/ipfamily"
)

var (
	vip4    = netip.MustParseAddr("198.18.0.10")
	vip4b   = netip.MustParseAddr("198.18.0.11")
	vip6    = netip.MustParseAddr("fd00:18::10")
	nodeIP  = netip.MustParseAddr("198.19.0.1")
	foreign = netip.MustParseAddr("198.18.9.9") // someone else's local route
)

type step struct {
	name      string
	want      []netip.Addr
	nodeAddrs []netip.Addr
	wantOurs  []netip.Addr
}

// steps are run in order against one table: the fake, and the real kernel
// in a fresh network namespace, where the same routes must result.
func steps() []step {
	return []step{
		{name: "add routes in both families", want: []netip.Addr{vip4, vip6}, wantOurs: []netip.Addr{vip4, vip6}},
		{name: "again: nothing changes", want: []netip.Addr{vip4, vip6}, wantOurs: []netip.Addr{vip4, vip6}},
		{name: "a node address gets no route", want: []netip.Addr{vip4, nodeIP}, nodeAddrs: []netip.Addr{nodeIP}, wantOurs: []netip.Addr{vip4}},
		{name: "an address with a foreign route is left to its owner", want: []netip.Addr{vip4, foreign}, wantOurs: []netip.Addr{vip4}},
		{name: "an address that became the node's loses kproxy's route", want: []netip.Addr{vip4, vip4b}, nodeAddrs: []netip.Addr{vip4}, wantOurs: []netip.Addr{vip4b}},
		{name: "IPv4-mapped addresses are IPv4", want: []netip.Addr{netip.AddrFrom16(vip4.As16())}, wantOurs: []netip.Addr{vip4}},
		{name: "remove all", want: nil, wantOurs: nil},
	}
}

func TestSyncOnFake(t *testing.T) {
	r := fakeroutes.New(nodeIP, foreign)
	runSteps(t, localroute.NewTable(r), true, r.Ours)
}

// A Table that does not verify reaches the same routes, listing the
// kernel's only on its first sync.
func TestTableOnFake(t *testing.T) {
	r := fakeroutes.New(nodeIP, foreign)
	runSteps(t, localroute.NewTable(r), false, r.Ours)
	if got, want := r.Lists(), len(ipfamily.All()); got != want {
		t.Errorf("%d List calls in %d syncs, want %d (the first sync's, one per family)", got, len(steps()), want)
	}
}

func TestTableRepairsAtVerifyingSyncs(t *testing.T) {
	r := fakeroutes.New()
	table := localroute.NewTable(r)
	want := []netip.Addr{vip4, vip6}
	if err := table.Sync(want, nil, false); err != nil {
		t.Fatal(err)
	}
	// Someone deletes kproxy's route behind its back.
	if err := r.Delete(vip4); err != nil {
		t.Fatal(err)
	}
	if err := table.Sync(want, nil, false); err != nil {
		t.Fatal(err)
	}
	if got := r.Ours(); !slices.Equal(got, []netip.Addr{vip6}) {
		t.Fatalf("after a sync that does not verify: routes %v, want only %v (it trusts its last sync)", got, vip6)
	}
	if err := table.Sync(want, nil, true); err != nil {
		t.Fatal(err)
	}
	if got := r.Ours(); !slices.Equal(got, want) {
		t.Fatalf("after a verifying sync: routes %v, want %v", got, want)
	}
}

func TestTableListsAgainAfterAFailure(t *testing.T) {
	r := fakeroutes.New()
	table := localroute.NewTable(r)
	r.FailAdd(vip4, syscall.ENETDOWN)
	if err := table.Sync([]netip.Addr{vip4}, nil, false); !errors.Is(err, syscall.ENETDOWN) {
		t.Fatalf("Sync = %v, want ENETDOWN", err)
	}
	r.FailAdd(vip4, nil)
	lists := r.Lists()
	if err := table.Sync([]netip.Addr{vip4}, nil, false); err != nil {
		t.Fatal(err)
	}
	if r.Lists() == lists {
		t.Error("the sync after a failed one trusted what the failed one left")
	}
	if got := r.Ours(); !slices.Equal(got, []netip.Addr{vip4}) {
		t.Errorf("routes %v, want %v", got, vip4)
	}
}

func TestSyncOnKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	run(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	run(t, "ip", "addr", "add", nodeIP.String()+"/24", "dev", "eth0")
	run(t, "ip", "link", "set", "eth0", "up")
	// A local route kproxy did not add, as another program would.
	run(t, "ip", "route", "add", "local", foreign.String()+"/32", "dev", "lo", "table", "local")
	r := &localroute.Netlink{}
	runSteps(t, localroute.NewTable(r), false, func() []netip.Addr {
		var all []netip.Addr
		for _, fam := range ipfamily.All() {
			addrs, err := r.List(fam)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, addrs...)
		}
		slices.SortFunc(all, func(a, b netip.Addr) int { return a.Compare(b) })
		return all
	})
	if out := run(t, "ip", "route", "show", "table", "local", foreign.String()); !strings.Contains(out, "local "+foreign.String()) {
		t.Errorf("the foreign local route is gone: %q", out)
	}
}

func TestRouteMakesAddressBindableAndLocal(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	if err := localroute.Sync(&localroute.Netlink{}, []netip.Addr{vip4}, nil); err != nil {
		t.Fatal(err)
	}
	if out := run(t, "ip", "route", "show", "table", "local", "proto", "107"); !strings.Contains(out, "local "+vip4.String()+" dev lo") {
		t.Errorf("ip route show table local proto 107 = %q, want the route on lo", out)
	}
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(vip4, 0).String())
	if err != nil {
		t.Fatalf("binding to an address with a local route: %v", err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatalf("connecting to it from the node: %v", err)
	}
	c.Close()
}

// runSteps syncs table through steps(); verify is every sync's.
func runSteps(t *testing.T, table *localroute.Table, verify bool, ours func() []netip.Addr) {
	t.Helper()
	for _, s := range steps() {
		if err := table.Sync(s.want, s.nodeAddrs, verify); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := ours(); !slices.Equal(got, s.wantOurs) {
			t.Fatalf("%s: kproxy's routes = %v, want %v", s.name, got, s.wantOurs)
		}
	}
}

func TestSyncReportsFailuresByAddress(t *testing.T) {
	r := fakeroutes.New()
	r.FailAdd(vip4, syscall.ENETDOWN)
	err := localroute.Sync(r, []netip.Addr{vip4, vip6}, nil)
	if !errors.Is(err, syscall.ENETDOWN) || !strings.Contains(err.Error(), "adding a local route for 198.18.0.10") {
		t.Fatalf("Sync = %v; want ENETDOWN naming 198.18.0.10", err)
	}
	if got := r.Ours(); !slices.Equal(got, []netip.Addr{vip6}) {
		t.Errorf("routes after a partial failure = %v, want the other address's", got)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// TestTableUpdate: after a sync, Update writes the addresses that came and
// went and nothing else; without a record, or with other node addresses, it
// leaves the work to a full sync.
func TestTableUpdate(t *testing.T) {
	r := fakeroutes.New(nodeIP, foreign)
	table := localroute.NewTable(r)
	if done, err := table.Update([]netip.Addr{vip4}, nil, nil); done || err != nil {
		t.Fatalf("Update before any sync = %t, %v; want it left to a sync", done, err)
	}
	if err := table.Sync([]netip.Addr{vip4}, []netip.Addr{nodeIP}, false); err != nil {
		t.Fatal(err)
	}
	lists := r.Lists()
	for _, tc := range []struct {
		name     string
		add, del []netip.Addr
		wantOurs []netip.Addr
	}{
		{name: "an address comes", add: []netip.Addr{vip6}, wantOurs: []netip.Addr{vip4, vip6}},
		{name: "one goes, another comes", add: []netip.Addr{vip4b}, del: []netip.Addr{vip4}, wantOurs: []netip.Addr{vip4b, vip6}},
		{name: "the node's own address gets no route", add: []netip.Addr{nodeIP}, wantOurs: []netip.Addr{vip4b, vip6}},
		{name: "a foreign route is left to its owner", add: []netip.Addr{foreign}, del: []netip.Addr{foreign}, wantOurs: []netip.Addr{vip4b, vip6}},
		{name: "an address not routed goes quietly", del: []netip.Addr{vip4}, wantOurs: []netip.Addr{vip4b, vip6}},
		{name: "IPv4-mapped addresses are IPv4", del: []netip.Addr{netip.AddrFrom16(vip4b.As16())}, wantOurs: []netip.Addr{vip6}},
	} {
		done, err := table.Update(tc.add, tc.del, []netip.Addr{nodeIP})
		if !done || err != nil {
			t.Fatalf("%s: Update = %t, %v", tc.name, done, err)
		}
		if got := r.Ours(); !slices.Equal(got, tc.wantOurs) {
			t.Fatalf("%s: routes %v, want %v", tc.name, got, tc.wantOurs)
		}
	}
	if r.Lists() != lists {
		t.Error("Update listed the kernel's routes")
	}
	if done, _ := table.Update([]netip.Addr{vip4}, nil, []netip.Addr{nodeIP, vip4b}); done {
		t.Error("Update with other node addresses did the work; want it left to a full sync")
	}
	// A full sync after updates starts from what they left.
	if err := table.Sync([]netip.Addr{vip6}, []netip.Addr{nodeIP}, false); err != nil {
		t.Fatal(err)
	}
	if got := r.Ours(); !slices.Equal(got, []netip.Addr{vip6}) {
		t.Fatalf("after a sync: routes %v, want %v", got, vip6)
	}
}
