package sklookup

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// TestSyncRefusesBadInput: compare refuses input the maps cannot hold.
func TestSyncRefusesBadInput(t *testing.T) {
	addr := netip.MustParseAddrPort("198.18.0.1:80")
	tooMany := map[Target]Action{}
	var tooManyGuarded []netip.Addr
	for i := range MaxTargets + 1 {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		tooMany[Target{TCP, netip.AddrPortFrom(a, uint16(i>>16)+1)}] = Steer
		if i <= MaxGuarded {
			tooManyGuarded = append(tooManyGuarded, netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)}))
		}
	}
	for _, tc := range []struct {
		name    string
		targets map[Target]Action
		guarded []netip.Addr
		wantErr string
	}{
		{"unknown action", map[Target]Action{{TCP, addr}: 0}, nil, "unknown action 0"},
		{"SCTP", map[Target]Action{{Protocol(unix.IPPROTO_SCTP), addr}: Steer}, nil, "only TCP and UDP"},
		{"no address", map[Target]Action{{TCP, netip.AddrPort{}}: Steer}, nil, "no address"},
		{"invalid guarded address", nil, []netip.Addr{{}}, "not an address"},
		{"IPv4-mapped target", map[Target]Action{{UDP, netip.MustParseAddrPort("[::ffff:198.18.0.1]:53")}: Steer}, nil, "unmapped"},
		{"zoned target", map[Target]Action{{UDP, netip.MustParseAddrPort("[fe80::1%lo]:53")}: Steer}, nil, "zone"},
		{"too many targets", tooMany, nil, "131073 targets, at most 131072 fit"},
		{"too many guarded addresses", nil, append(tooManyGuarded, tooManyGuarded...), "65537 guarded addresses, at most 65536 fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKernelState()
			_, err := k.compare(tc.targets, tc.guarded)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("compare: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestKeysKeepFamiliesApart checks the key layout the program builds: an
// IPv4 address is ::ffff:a.b.c.d with family AF_INET, so it never equals an
// IPv6 key; a guarded IPv4-mapped address is the IPv4 one.
func TestKeysKeepFamiliesApart(t *testing.T) {
	v4, err := targetKey(Target{UDP, netip.MustParseAddrPort("198.18.0.1:53")})
	if err != nil {
		t.Fatal(err)
	}
	want := mapKey{Addr: netip.MustParseAddr("::ffff:198.18.0.1").As16(), Port: 53, Proto: unix.IPPROTO_UDP, Family: unix.AF_INET}
	if v4 != want {
		t.Errorf("IPv4 key %+v, want %+v", v4, want)
	}
	v6, _ := targetKey(Target{UDP, netip.MustParseAddrPort("[fd00::1]:53")})
	if v6.Family != unix.AF_INET6 || v6.Addr != netip.MustParseAddr("fd00::1").As16() {
		t.Errorf("IPv6 key %+v", v6)
	}
	g4, _ := guardedKey(netip.MustParseAddr("198.18.0.1"))
	gMapped, _ := guardedKey(netip.MustParseAddr("::ffff:198.18.0.1"))
	if wantG := (mapKey{Addr: want.Addr, Family: unix.AF_INET}); g4 != wantG || gMapped != wantG {
		t.Errorf("guarded keys %+v and %+v, want both %+v", g4, gMapped, wantG)
	}
}

// TestSyncWritesTheDifference loads the maps (no attachment: map writes do
// not depend on a namespace) and checks after each Sync that the kernel's
// maps read back equal to the input, with batches and one key at a time, and
// that a Sync after a failed write repairs maps changed behind its back.
func TestSyncWritesTheDifference(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF) to create BPF maps")
	}
	for _, perKey := range []bool{false, true} {
		t.Run(fmt.Sprintf("perKey=%t", perKey), func(t *testing.T) {
			o, err := load()
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			s := newSteering(o, nil)
			defer s.Close()
			s.perKey = perKey

			big, bigGuarded := services(400)
			smaller, smallerGuarded := services(240)
			changed, _ := services(400)
			for tgt := range changed {
				if tgt.Addr.Port()%2 == 0 {
					changed[tgt] = Drop
				}
			}
			steps := []struct {
				name    string
				targets map[Target]Action
				guarded []netip.Addr
				tamper  func(t *testing.T)
			}{
				{"first", big, bigGuarded, nil},
				{"unchanged", big, bigGuarded, nil},
				{"fewer", smaller, smallerGuarded, nil},
				{"more again, half dropped", changed, bigGuarded, nil},
				{"guarded addresses named twice", changed, append(bigGuarded, bigGuarded[:10]...), nil},
				{"repaired after a failed write", changed, bigGuarded, func(t *testing.T) {
					var k mapKey
					var v uint32
					if !s.targets.Iterate().Next(&k, &v) {
						t.Fatal("empty targets map")
					}
					if err := s.targets.Delete(k); err != nil {
						t.Fatal(err)
					}
					if err := s.guarded.Put(mapKey{Family: unix.AF_INET6}, uint8(1)); err != nil {
						t.Fatal(err)
					}
					s.stale = true // as a failed write leaves it
				}},
				{"empty", nil, nil, nil},
			}
			for _, step := range steps {
				if step.tamper != nil {
					step.tamper(t)
				}
				if err := s.Sync(step.targets, step.guarded); err != nil {
					t.Fatalf("%s: Sync: %v", step.name, err)
				}
				got, err := s.readBack()
				if err != nil {
					t.Fatal(err)
				}
				wantTargets, wantGuarded := contents(t, step.targets, step.guarded)
				gotTargets, gotGuarded := values(got.targets), values(got.guarded)
				if diff := cmp.Diff(wantTargets, gotTargets); diff != "" {
					t.Fatalf("%s: targets map after Sync (-want +got):\n%s", step.name, diff)
				}
				if diff := cmp.Diff(wantGuarded, gotGuarded); diff != "" {
					t.Fatalf("%s: guarded map after Sync (-want +got):\n%s", step.name, diff)
				}
				if diff := cmp.Diff(values(s.written.targets), gotTargets); diff != "" {
					t.Fatalf("%s: Sync's record differs from the targets map (-record +map):\n%s", step.name, diff)
				}
			}
		})
	}
}

// services makes n TCP and n UDP targets on n/4 IPv4 and n/4 IPv6 addresses.
func services(n int) (map[Target]Action, []netip.Addr) {
	targets := map[Target]Action{}
	var guarded []netip.Addr
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i / 8 >> 8), byte(i / 8)})
		if i%8 >= 4 {
			a = netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x18, 14: byte(i / 8 >> 8), 15: byte(i / 8)})
		}
		if i%4 == 0 {
			guarded = append(guarded, a)
		}
		port := uint16(1000 + i%4)
		targets[Target{TCP, netip.AddrPortFrom(a, port)}] = Steer
		targets[Target{UDP, netip.AddrPortFrom(a, port)}] = Steer
	}
	return targets, guarded
}

// contents is what the maps must hold for this input, built without the
// code under test's comparison.
func contents(t *testing.T, targets map[Target]Action, guarded []netip.Addr) (map[mapKey]uint32, map[mapKey]uint32) {
	t.Helper()
	ts, gs := map[mapKey]uint32{}, map[mapKey]uint32{}
	for tgt, a := range targets {
		k, err := targetKey(tgt)
		if err != nil {
			t.Fatal(err)
		}
		ts[k] = uint32(a)
	}
	for _, a := range guarded {
		k, err := guardedKey(a)
		if err != nil {
			t.Fatal(err)
		}
		gs[k] = 1
	}
	return ts, gs
}

func values(m map[mapKey]*entry) map[mapKey]uint32 {
	out := make(map[mapKey]uint32, len(m))
	for k, e := range m {
		out[k] = e.value
	}
	return out
}

// TestPatchWritesTheChange: random patches (targets set, re-set to another
// action, deleted; guarded addresses added and deleted, some named twice or
// both ways) leave the maps holding what the same changes made to a plain
// copy say, and refuse bad input without writing.
func TestPatchWritesTheChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF) to create BPF maps")
	}
	o, err := load()
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	s := newSteering(o, nil)
	defer s.Close()
	all, allGuarded := services(64)
	pool := slices.Collect(maps.Keys(all))
	slices.SortFunc(pool, func(a, b Target) int { return a.Addr.Compare(b.Addr)*4 + int(a.Protocol) - int(b.Protocol) })
	wantTargets := map[Target]Action{}
	wantGuarded := map[netip.Addr]bool{}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 200 {
		set := map[Target]Action{}
		var del []Target
		var addG, delG []netip.Addr
		for range 1 + rng.IntN(8) {
			tgt := pool[rng.IntN(len(pool))]
			if rng.IntN(3) == 0 {
				del = append(del, tgt)
			} else {
				set[tgt] = []Action{Steer, Drop, Discard, ServeNode}[rng.IntN(4)]
			}
			a := allGuarded[rng.IntN(len(allGuarded))]
			if rng.IntN(2) == 0 {
				addG = append(addG, a, a)
			} else {
				delG = append(delG, a)
			}
		}
		if err := s.Patch(set, del, addG, delG); err != nil {
			t.Fatalf("step %d: Patch: %v", step, err)
		}
		for _, tgt := range del {
			delete(wantTargets, tgt)
		}
		maps.Copy(wantTargets, set)
		for _, a := range delG {
			delete(wantGuarded, a)
		}
		for _, a := range addG {
			wantGuarded[a] = true
		}
		got, err := s.readBack()
		if err != nil {
			t.Fatal(err)
		}
		wantT, wantG := contents(t, wantTargets, slices.Collect(maps.Keys(wantGuarded)))
		if diff := cmp.Diff(wantT, values(got.targets)); diff != "" {
			t.Fatalf("step %d: targets map after Patch (-want +got):\n%s", step, diff)
		}
		if diff := cmp.Diff(wantG, values(got.guarded)); diff != "" {
			t.Fatalf("step %d: guarded map after Patch (-want +got):\n%s", step, diff)
		}
		if diff := cmp.Diff(values(s.written.targets), values(got.targets)); diff != "" {
			t.Fatalf("step %d: Patch's record differs from the targets map (-record +map):\n%s", step, diff)
		}
	}
	before, err := s.readBack()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Patch(map[Target]Action{pool[0]: 0}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "unknown action") {
		t.Errorf("Patch with an unknown action: %v, want it refused", err)
	}
	if err := s.Patch(nil, nil, []netip.Addr{{}}, nil); err == nil {
		t.Error("Patch with an invalid guarded address succeeded")
	}
	after, err := s.readBack()
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(values(before.targets), values(after.targets)) || !cmp.Equal(values(before.guarded), values(after.guarded)) {
		t.Error("a refused Patch changed the maps")
	}
}
