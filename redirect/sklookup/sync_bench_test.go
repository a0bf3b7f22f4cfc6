package sklookup

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
)

// BenchmarkSync30000 times Sync at 30,000 services, each one TCP port on its
// own cluster IP (30,000 targets, 30,000 guarded addresses): the first Sync
// into empty maps, a Sync that changes one target, and one that changes
// nothing; with batch map operations and one key at a time. Map writes do
// not depend on a namespace, so the program is loaded but not attached.
func BenchmarkSync30000(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (CAP_BPF) to create BPF maps")
	}
	const n = 30000
	targets, guarded := oneServicePerAddress(n)
	changed := map[Target]Action{}
	for t, a := range targets {
		changed[t] = a
	}
	one := Target{TCP, netip.AddrPortFrom(guarded[n/2], 80)}
	changed[one] = Drop

	for _, perKey := range []bool{false, true} {
		mode := "batch"
		if perKey {
			mode = "per-key"
		}
		b.Run(fmt.Sprintf("first/%s", mode), func(b *testing.B) {
			retries := 0
			for b.Loop() {
				b.StopTimer()
				s := loadUnattached(b, perKey)
				b.StartTimer()
				if err := s.Sync(targets, guarded); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				retries += s.retries
				s.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(retries)/float64(b.N), "ENOMEM-retries/op")
		})
		b.Run(fmt.Sprintf("one-target-changed/%s", mode), func(b *testing.B) {
			s := loadUnattached(b, perKey)
			defer s.Close()
			if err := s.Sync(targets, guarded); err != nil {
				b.Fatal(err)
			}
			flip := []map[Target]Action{changed, targets}
			i := 0
			for b.Loop() {
				if err := s.Sync(flip[i%2], guarded); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	b.Run("unchanged", func(b *testing.B) {
		s := loadUnattached(b, false)
		defer s.Close()
		if err := s.Sync(targets, guarded); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := s.Sync(targets, guarded); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func loadUnattached(b *testing.B, perKey bool) *Steering {
	o, err := load()
	if err != nil {
		b.Fatal(err)
	}
	s := newSteering(o, nil)
	s.perKey = perKey
	return s
}

// oneServicePerAddress makes n TCP port-80 targets on n IPv4 addresses in
// 198.18.0.0/16 and 198.19.0.0/16.
func oneServicePerAddress(n int) (map[Target]Action, []netip.Addr) {
	targets := make(map[Target]Action, n)
	guarded := make([]netip.Addr, 0, n)
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)})
		guarded = append(guarded, a)
		targets[Target{TCP, netip.AddrPortFrom(a, 80)}] = Steer
	}
	return targets, guarded
}
