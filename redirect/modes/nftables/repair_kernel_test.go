package nftables

import (
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestKernelRepairsDamagedMaps damages the table the way the canary chain
// does not show (a flushed map or set, single elements deleted), with the
// real nft in a fresh network namespace, both families programmed: the
// next sync, with no service change, must rewrite the table. Before that,
// someone else's harmless write (another table) makes the mode check, and
// it must find nothing to repair.
func TestKernelRepairsDamagedMaps(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for _, tc := range []struct {
		name   string
		fam    ipfamily.Family
		damage []string // nft arguments
		also   []string // a second command, run after damage
	}{
		{"flush service-ips", ipfamily.IPv4, []string{"flush", "map", "ip", TableName, "service-ips"}, nil},
		{"flush service-nodeports", ipfamily.IPv4, []string{"flush", "map", "ip", TableName, "service-nodeports"}, nil},
		{"flush service-ips ip6", ipfamily.IPv6, []string{"flush", "map", "ip6", TableName, "service-ips"}, nil},
		{"delete one service-ips element", ipfamily.IPv4,
			[]string{"delete", "element", "ip", TableName, "service-ips", "{ 198.18.0.27 . tcp . 80 }"}, nil},
		{"delete one service-nodeports element", ipfamily.IPv6,
			[]string{"delete", "element", "ip6", TableName, "service-nodeports", "{ tcp . 30086 }"}, nil},
		{"delete one cluster-ips element", ipfamily.IPv4,
			[]string{"delete", "element", "ip", TableName, "cluster-ips", "{ 198.18.0.26 }"}, nil},
		{"flush nodeport-ips", ipfamily.IPv4, []string{"flush", "set", "ip", TableName, "nodeport-ips"}, nil},
		// A missing map cannot take elements: the sync is a full one.
		{"delete map service-ips", ipfamily.IPv4, []string{"flush", "chain", "ip", TableName, "services"},
			[]string{"delete", "map", "ip", TableName, "service-ips"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reals := map[ipfamily.Family]knftables.Interface{}
			fakes := map[ipfamily.Family]knftables.Interface{}
			for _, fam := range ipfamily.All() {
				reals[fam], fakes[fam] = realNFT(t, fam), fakeFor(fam)
			}
			m := newTestMode(t, nil, reals)
			mf := newTestMode(t, nil, fakes)
			snap := scenarioNamed(t, "dual-stack").Snapshot()
			mustSync(t, m, snap, full())
			mustSync(t, mf, snap, full())
			// A partial sync of the mode's own, then a write elsewhere:
			// the check runs and must find the table intact.
			v4only := servicemap.ServicePortName{}
			for name := range snap.All() {
				if strings.Contains(name.String(), "v4only") {
					v4only = name
				}
			}
			next := snapshotOf(2, portsExcept(snap, v4only)...)
			cs := changesBetween(snap, next)
			mustSync(t, m, next, cs)
			mustSync(t, mf, next, cs)
			mustSync(t, m, snap, changesBetween(next, snap))
			mustSync(t, mf, snap, changesBetween(next, snap))
			// Only the mode wrote since: nothing is checked.
			before := checks(m)
			mustSync(t, m, snap, &servicemap.ChangeSet{})
			if n := checks(m) - before; n != 0 {
				t.Errorf("%d checks with nobody else writing", n)
			}
			lab.Run(t, "nft", "add", "table", "ip", "someone-else")
			defer func() { _ = exec.Command("nft", "delete", "table", "ip", "someone-else").Run() }()
			mustSync(t, m, snap, &servicemap.ChangeSet{})
			if n := checks(m) - before; n != 2 {
				t.Errorf("%d checks after someone else's write; want one per family", n)
			}
			if n := repairs(m); n != 0 {
				t.Fatalf("%d repairs of an intact table", n)
			}

			lab.Run(t, "nft", tc.damage...)
			if tc.also != nil {
				lab.Run(t, "nft", tc.also...)
			}
			mustSync(t, m, snap, &servicemap.ChangeSet{})
			if n := repairs(m); n != 1 {
				t.Errorf("%d repairs after %q; want 1", n, strings.Join(tc.damage, " "))
			}
			for _, fam := range ipfamily.All() {
				compareKeeping(t, fam, fakes[fam].(*knftables.Fake), "the sync after "+strings.Join(tc.damage, " "))
			}
			// Repaired: the syncs after it have nothing to do.
			mustSync(t, m, snap, &servicemap.ChangeSet{})
			if n := repairs(m); n != 1 {
				t.Errorf("%d repairs after the repair; want it to stay 1", n)
			}
		})
	}
}

func checks(m *Mode) int {
	n := 0
	for _, f := range m.families.List() {
		n += f.checks
	}
	return n
}

func repairs(m *Mode) int {
	n := 0
	for _, f := range m.families.List() {
		n += f.repairs
	}
	return n
}

// portsExcept lists snap's ports but one.
func portsExcept(snap *servicemap.Snapshot, skip servicemap.ServicePortName) []*servicemap.ServicePort {
	var out []*servicemap.ServicePort
	for name, sp := range snap.All() {
		if name != skip {
			out = append(out, sp)
		}
	}
	return out
}
