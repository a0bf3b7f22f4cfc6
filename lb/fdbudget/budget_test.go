package fdbudget

import (
	"net/netip"
	"sync"
	"testing"
)

func TestAcquireRelease(t *testing.T) {
	a, b := netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2")
	type step struct {
		acquire bool // else release
		client  netip.Addr
		want    Verdict
	}
	tests := []struct {
		name             string
		total, perClient int
		steps            []step
		wantHeld         int
	}{
		{"client share", 10, 2, []step{{true, a, Granted}, {true, a, Granted}, {true, a, ClientFull}, {true, b, Granted}}, 3},
		{"total share", 3, 2, []step{{true, a, Granted}, {true, a, Granted}, {true, b, Granted}, {true, b, Full}}, 3},
		{"release frees the client's share", 10, 1, []step{{true, a, Granted}, {true, a, ClientFull}, {false, a, 0}, {true, a, Granted}}, 1},
		{"release frees the total", 1, 1, []step{{true, a, Granted}, {true, b, Full}, {false, a, 0}, {true, b, Granted}}, 1},
		{"a release never granted is ignored", 2, 2, []step{{false, a, 0}, {true, a, Granted}, {true, b, Granted}, {true, b, Full}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bud, err := New(tc.total, tc.perClient)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				if !s.acquire {
					bud.Release(s.client)
					continue
				}
				if got := bud.Acquire(s.client); got != s.want {
					t.Errorf("step %d: Acquire(%s) = %v, want %v", i, s.client, got, s.want)
				}
			}
			if held, _ := bud.Held(a); held != tc.wantHeld {
				t.Errorf("held %d, want %d", held, tc.wantHeld)
			}
		})
	}
}

func TestForLimit(t *testing.T) {
	tests := []struct {
		limit                    uint64
		wantTotal, wantPerClient int
	}{
		{2000, 1000, 250},
		{1024, 512, 128},
		{40, 20, 16}, // a busy client keeps a usable share under a tiny limit
		{20, 10, 10},
		{1 << 40, 1 << 29, 1 << 27}, // RLIM_INFINITY-like limits stay ints
	}
	for _, tc := range tests {
		b, err := ForLimit(tc.limit)
		if err != nil {
			t.Fatalf("ForLimit(%d): %v", tc.limit, err)
		}
		if total, per := b.Limits(); total != tc.wantTotal || per != tc.wantPerClient {
			t.Errorf("ForLimit(%d) = %d, %d; want %d, %d", tc.limit, total, per, tc.wantTotal, tc.wantPerClient)
		}
	}
	if _, err := ForLimit(1); err == nil {
		t.Error("ForLimit(1): want an error, the flows' share is empty")
	}
}

func TestNilBudgetGrants(t *testing.T) {
	var b *Budget
	if got := b.Acquire(netip.MustParseAddr("198.19.0.1")); got != Granted {
		t.Errorf("nil budget: %v", got)
	}
	b.Release(netip.MustParseAddr("198.19.0.1"))
}

func TestConcurrentUse(t *testing.T) {
	b, err := New(100, 100)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	granted := make(chan int, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := netip.AddrFrom4([4]byte{198, 19, 0, byte(i)})
			n := 0
			for range 50 {
				if b.Acquire(client) == Granted {
					n++
				}
			}
			granted <- n
		}()
	}
	wg.Wait()
	close(granted)
	sum := 0
	for n := range granted {
		sum += n
	}
	if held, _ := b.Held(netip.Addr{}); sum != 100 || held != 100 {
		t.Errorf("granted %d, held %d; want 100 of 400 asked", sum, held)
	}
}
