package udprelay

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestFlowTableAddressOrder drives a flow table through random adds,
// touches and removals and checks after each step that every client
// address's ring holds that address's flows in the table's least recently
// active order, which is what a client at its share gives up first.
func TestFlowTableAddressOrder(t *testing.T) {
	addrs := []netip.Addr{
		netip.MustParseAddr("198.19.0.2"),
		netip.MustParseAddr("198.19.0.3"),
		netip.MustParseAddr("fd00::2"),
		netip.MustParseAddr("::ffff:198.19.0.2"), // the same client as the first, mapped
	}
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			table := newFlowTable()
			var live []*flow
			for step := range 2000 {
				var op string
				switch n := rng.IntN(10); {
				case n < 4 || len(live) == 0:
					f := &flow{client: netip.AddrPortFrom(addrs[rng.IntN(len(addrs))], uint16(step+1)), fd: step + 3}
					table.add(f)
					live = append(live, f)
					op = "add " + f.client.String()
				case n < 8:
					f := live[rng.IntN(len(live))]
					table.touch(f, int64(step))
					op = "touch " + f.client.String()
				default:
					i := rng.IntN(len(live))
					table.remove(live[i])
					op = "remove " + live[i].client.String()
					live = slices.Delete(live, i, i+1)
				}
				if err := checkAddressRings(table); err != nil {
					t.Fatalf("step %d (%s): %v", step, op, err)
				}
			}
		})
	}
}

// checkAddressRings compares every ring with the table's order filtered by
// address.
func checkAddressRings(table *flowTable) error {
	want := map[netip.Addr][]*flow{}
	for f := table.oldest(); f != nil && f != &table.head; f = f.next {
		a := f.client.Addr().Unmap()
		want[a] = append(want[a], f)
	}
	if len(table.byAddress) != len(want) {
		return fmt.Errorf("rings for %d addresses, want %d", len(table.byAddress), len(want))
	}
	for a, flows := range want {
		if got := table.oldestOf(a); got != flows[0] {
			return fmt.Errorf("%s: oldest is %v, want %v", a, clients([]*flow{got}), flows[0].client)
		}
		var ring []*flow
		f := flows[0]
		for range len(flows) + 1 {
			ring = append(ring, f)
			if f.sibling.next.sibling.prev != f {
				return fmt.Errorf("%s: ring links disagree at %v", a, f.client)
			}
			if f = f.sibling.next; f == flows[0] {
				break
			}
		}
		if !slices.Equal(ring, flows) {
			return fmt.Errorf("%s: ring %v, want %v", a, clients(ring), clients(flows))
		}
	}
	return nil
}

// clients lists the flows' client addresses (an invalid one for nil).
func clients(flows []*flow) []netip.AddrPort {
	var out []netip.AddrPort
	for _, f := range flows {
		if f == nil {
			out = append(out, netip.AddrPort{})
			continue
		}
		out = append(out, f.client)
	}
	return out
}
