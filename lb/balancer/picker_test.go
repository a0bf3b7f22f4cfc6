package balancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/nodepods"
	"kproxy.dev/kproxy/sync/ipfamily"
)

var (
	clientA = netip.MustParseAddr("198.19.9.1")
	clientB = netip.MustParseAddr("198.19.9.2")
)

// threeBackends is service s with endpoints .1, .2 and .3.
func threeBackends(w *world, opts ...svcOpt) {
	w.apply([]*v1.Service{service("s", opts...)}, []*discovery.EndpointSlice{slice("s", "s-1",
		ep("198.19.1.1"), ep("198.19.1.2"), ep("198.19.1.3"))})
}

func TestRoundRobin(t *testing.T) {
	all := aps("198.19.1.1:8080", "198.19.1.2:8080", "198.19.1.3:8080")
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("%d endpoints", n), func(t *testing.T) {
			w := newWorld(t, Config{})
			var eps []discovery.Endpoint
			for _, a := range all[:n] {
				eps = append(eps, ep(a.Addr().String()))
			}
			w.apply([]*v1.Service{service("s")}, []*discovery.EndpointSlice{slice("s", "s-1", eps...)})
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))

			const rounds = 100
			first := map[netip.AddrPort]int{}
			for i := range rounds * n {
				got := p.Pick(clientA)
				// The chosen endpoint, then the others in round-robin order.
				want := make([]netip.AddrPort, n)
				for k := range n {
					want[k] = all[(i+k)%n]
				}
				if !cmp.Equal(got, want, cmpAddrPort) {
					t.Fatalf("pick %d = %v, want %v", i, got, want)
				}
				first[got[0]]++
			}
			for _, a := range all[:n] {
				if first[a] != rounds {
					t.Errorf("%v chosen %d times in %d picks, want %d", a, first[a], rounds*n, rounds)
				}
			}
		})
	}
}

func TestPickResultCannotCorruptLaterPicks(t *testing.T) {
	w := newWorld(t, Config{})
	threeBackends(w)
	p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
	got := p.Pick(clientA)
	if cap(got) != len(got) {
		t.Fatalf("cap %d > len %d: an append would write into the shared ring", cap(got), len(got))
	}
	_ = append(got, netip.MustParseAddrPort("192.0.2.1:1"))
	for range 6 {
		for _, a := range p.Pick(clientA) {
			if a.Addr().String() == "192.0.2.1" {
				t.Fatalf("appended address leaked into a later pick")
			}
		}
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	w := newWorld(t, Config{})
	threeBackends(w, affinity(60))
	pinned := w.b.Picker(key("s", Internal, ipfamily.IPv4))
	pinned.Connected(clientA, netip.MustParseAddrPort("198.19.1.2:8080"))

	w2 := newWorld(t, Config{})
	threeBackends(w2)
	plain := w2.b.Picker(key("s", Internal, ipfamily.IPv4))

	for name, pick := range map[string]func(){
		"round-robin":       func() { plain.Pick(clientA) },
		"affinity, pinned":  func() { pinned.Pick(clientA) },
		"affinity, no pin":  func() { pinned.Pick(clientB) },
		"connected refresh": func() { pinned.Connected(clientA, netip.MustParseAddrPort("198.19.1.2:8080")) },
	} {
		if allocs := testing.AllocsPerRun(1000, pick); allocs != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, allocs)
		}
	}
}

func TestAffinity(t *testing.T) {
	ep1, ep2, ep3 := netip.MustParseAddrPort("198.19.1.1:8080"), netip.MustParseAddrPort("198.19.1.2:8080"),
		netip.MustParseAddrPort("198.19.1.3:8080")
	tests := []struct {
		name  string
		steps func(t *testing.T, w *world) []netip.AddrPort // the endpoints it checks
		want  []netip.AddrPort
	}{{
		name: "pin holds across picks while round-robin moves on for others",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep2)
			var out []netip.AddrPort
			for range 4 {
				out = append(out, p.Pick(clientA)[0], p.Pick(clientB)[0])
			}
			return out
		},
		want: []netip.AddrPort{ep2, ep1, ep2, ep2, ep2, ep3, ep2, ep1},
	}, {
		name: "pinned pick lists the others in round-robin order after the pin",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			return p.Pick(clientA)
		},
		want: []netip.AddrPort{ep3, ep1, ep2},
	}, {
		name: "IPv4-mapped client address shares the pin",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			return []netip.AddrPort{p.Pick(netip.AddrFrom16(clientA.As16()))[0]}
		},
		want: []netip.AddrPort{ep3},
	}, {
		name: "each use refreshes the timeout",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			var out []netip.AddrPort
			for range 3 { // 3 x 40s > 60s timeout, but never 60s unused
				w.clock.Step(40 * time.Second)
				out = append(out, p.Pick(clientA)[0])
			}
			return out
		},
		want: []netip.AddrPort{ep3, ep3, ep3},
	}, {
		name: "pin expires after the timeout unused",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			w.clock.Step(59 * time.Second)
			first := p.Pick(clientA)[0]
			w.clock.Step(60 * time.Second)
			return []netip.AddrPort{first, p.Pick(clientA)[0], p.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep3, ep1, ep2},
	}, {
		name: "Failed drops the pin",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			p.Failed(clientA, ep3)
			return []netip.AddrPort{p.Pick(clientA)[0], p.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep1, ep2},
	}, {
		name: "Failed for another endpoint keeps the pin",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			p.Failed(clientA, ep1)
			return []netip.AddrPort{p.Pick(clientA)[0], p.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep3, ep3},
	}, {
		name: "Connected to another endpoint moves the pin",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			p.Connected(clientA, ep1)
			return []netip.AddrPort{p.Pick(clientA)[0], p.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep1, ep1},
	}, {
		name: "stale pin dropped at Update and not revived when the endpoint returns",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			w.apply(nil, []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.1"), ep("198.19.1.2"))})
			if n := w.b.AffinityEntries(); n != 0 {
				t.Errorf("affinity entries after the endpoint left = %d, want 0", n)
			}
			w.apply(nil, []*discovery.EndpointSlice{slice("s", "s-1",
				ep("198.19.1.1"), ep("198.19.1.2"), ep("198.19.1.3"))})
			return []netip.AddrPort{p.Pick(clientA)[0], p.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep1, ep2},
	}, {
		name: "pin kept at Update while its endpoint stays eligible",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			w.apply(nil, []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.3"), ep("198.19.1.4"))})
			return []netip.AddrPort{p.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep3},
	}, {
		name: "pins cleared when affinity is turned off",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, ep3)
			w.apply([]*v1.Service{service("s")}, nil)
			return []netip.AddrPort{p.Pick(clientA)[0], p.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep1, ep2},
	}, {
		name: "Connected to an endpoint that is not eligible pins nothing",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
			p.Connected(clientA, netip.MustParseAddrPort("198.19.1.9:8080"))
			return []netip.AddrPort{p.Pick(clientA)[0], p.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep1, ep2},
	}, {
		name: "pins are per picker: the external class round-robins",
		steps: func(t *testing.T, w *world) []netip.AddrPort {
			w.b.Picker(key("s", Internal, ipfamily.IPv4)).Connected(clientA, ep3)
			ext := w.b.Picker(key("s", External, ipfamily.IPv4))
			return []netip.AddrPort{ext.Pick(clientA)[0], ext.Pick(clientA)[0]}
		},
		want: []netip.AddrPort{ep1, ep2},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, Config{})
			threeBackends(w, affinity(60))
			if diff := cmp.Diff(tc.want, tc.steps(t, w), cmpAddrPort); diff != "" {
				t.Errorf("picked first (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAffinityWithoutTimeoutIsOff(t *testing.T) {
	w := newWorld(t, Config{})
	threeBackends(w)
	p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
	p.Connected(clientA, netip.MustParseAddrPort("198.19.1.3:8080"))
	if got := p.Pick(clientA)[0]; got != netip.MustParseAddrPort("198.19.1.1:8080") {
		t.Errorf("without affinity the first pick is %v, want round-robin's 198.19.1.1:8080", got)
	}
	if n := w.b.AffinityEntries(); n != 0 {
		t.Errorf("affinity entries = %d, want 0", n)
	}
}

func TestSweep(t *testing.T) {
	w := newWorld(t, Config{})
	threeBackends(w, affinity(60))
	p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
	p.Connected(clientA, netip.MustParseAddrPort("198.19.1.1:8080"))
	w.clock.Step(30 * time.Second)
	p.Connected(clientB, netip.MustParseAddrPort("198.19.1.2:8080"))

	if n := w.b.Sweep(w.clock.Now().Add(29 * time.Second)); n != 0 {
		t.Errorf("sweep at 59s dropped %d, want 0", n)
	}
	if n := w.b.Sweep(w.clock.Now().Add(30 * time.Second)); n != 1 {
		t.Errorf("sweep at 60s dropped %d, want 1 (clientA)", n)
	}
	if n := w.b.AffinityEntries(); n != 1 {
		t.Errorf("entries after sweep = %d, want 1", n)
	}
	if got := p.Pick(clientB)[0]; got != netip.MustParseAddrPort("198.19.1.2:8080") {
		t.Errorf("clientB lost its pin: picked %v", got)
	}
	if n := w.b.Sweep(w.clock.Now().Add(time.Hour)); n != 1 {
		t.Errorf("sweep an hour later dropped %d, want 1", n)
	}
	if n := w.b.AffinityEntries(); n != 0 {
		t.Errorf("entries after the last sweep = %d, want 0", n)
	}
}

func TestAffinityBoundedOldestDropped(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := newWorld(t, Config{MaxAffinityEntries: 2, Registerer: reg})
	threeBackends(w, affinity(600))
	p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
	ep3 := netip.MustParseAddrPort("198.19.1.3:8080")
	clients := []netip.Addr{clientA, clientB, netip.MustParseAddr("198.19.9.3")}
	p.Connected(clients[0], ep3)
	p.Connected(clients[1], ep3)
	p.Pick(clients[0]) // refresh A: B is now the oldest
	p.Connected(clients[2], ep3)

	for i, c := range clients {
		pinned := p.Pick(c)[0] == ep3
		if wantPinned := i != 1; pinned != wantPinned {
			t.Errorf("client %v pinned = %v, want %v", c, pinned, wantPinned)
		}
	}
	want := `
# HELP kproxy_userspace_affinity_entries ClientIP session-affinity pins currently held by the userspace balancer
# TYPE kproxy_userspace_affinity_entries gauge
kproxy_userspace_affinity_entries 2
# HELP kproxy_userspace_affinity_evictions_total ClientIP session-affinity pins dropped before expiry because a service port reached its pin limit
# TYPE kproxy_userspace_affinity_evictions_total counter
kproxy_userspace_affinity_evictions_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if _, err := New(Config{Registerer: reg}); err == nil {
		t.Error("a second balancer on the same registry registered without error")
	}
}

func TestUpdate(t *testing.T) {
	ep1, ep2, ep3, ep4 := netip.MustParseAddrPort("198.19.1.1:8080"), netip.MustParseAddrPort("198.19.1.2:8080"),
		netip.MustParseAddrPort("198.19.1.3:8080"), netip.MustParseAddrPort("198.19.1.4:8080")

	t.Run("unchanged port keeps its cursor and pins when another service changes", func(t *testing.T) {
		w := newWorld(t, Config{})
		threeBackends(w, affinity(60))
		p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
		p.Connected(clientA, ep3)
		p.Pick(clientB) // cursor now at ep2
		before := p.(*picker).state.Load()

		w.apply([]*v1.Service{service("other")}, []*discovery.EndpointSlice{slice("other", "o-1", ep("198.19.2.1"))})
		if p.(*picker).state.Load() != before {
			t.Error("state of an unchanged port was replaced")
		}
		if got := []netip.AddrPort{p.Pick(clientB)[0], p.Pick(clientA)[0]}; !cmp.Equal(got, []netip.AddrPort{ep2, ep3}, cmpAddrPort) {
			t.Errorf("after update: clientB %v, clientA %v; want round-robin to continue at %v and clientA pinned to %v",
				got[0], got[1], ep2, ep3)
		}
	})

	t.Run("held picker sees added and removed endpoints, cursor continues", func(t *testing.T) {
		w := newWorld(t, Config{})
		threeBackends(w)
		p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
		p.Pick(clientA) // ep1; cursor 1
		w.apply(nil, []*discovery.EndpointSlice{slice("s", "s-1",
			ep("198.19.1.1"), ep("198.19.1.2"), ep("198.19.1.3"), ep("198.19.1.4"))})
		var got []netip.AddrPort
		for range 4 {
			got = append(got, p.Pick(clientA)[0])
		}
		if want := []netip.AddrPort{ep2, ep3, ep4, ep1}; !cmp.Equal(got, want, cmpAddrPort) {
			t.Errorf("after adding an endpoint picks = %v, want %v", got, want)
		}
		w.apply(nil, []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.4"))})
		if got := p.Pick(clientA); !cmp.Equal(got, []netip.AddrPort{ep4}, cmpAddrPort) {
			t.Errorf("after removing endpoints pick = %v, want [%v]", got, ep4)
		}
	})

	t.Run("all endpoints gone: empty, then back", func(t *testing.T) {
		w := newWorld(t, Config{})
		threeBackends(w)
		p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
		w.tr.OnEndpointSliceDelete(types.NamespacedName{Namespace: "ns", Name: "s-1"})
		w.sync()
		if got := p.Pick(clientA); len(got) != 0 {
			t.Errorf("with no endpoints pick = %v, want empty", got)
		}
		threeBackends(w)
		if got := p.Pick(clientA); len(got) != 3 {
			t.Errorf("with endpoints back pick = %v, want 3 endpoints", got)
		}
	})

	t.Run("removed service: held picker returns empty, new picker after re-add", func(t *testing.T) {
		w := newWorld(t, Config{})
		threeBackends(w, affinity(60))
		p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
		p.Connected(clientA, ep1)
		w.tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "s"})
		w.sync()
		if got := p.Pick(clientA); len(got) != 0 {
			t.Errorf("removed service pick = %v, want empty", got)
		}
		if n := w.b.AffinityEntries(); n != 0 {
			t.Errorf("removed service left %d affinity entries", n)
		}
		threeBackends(w, affinity(60))
		if got := w.b.Picker(key("s", Internal, ipfamily.IPv4)).Pick(clientA); len(got) != 3 {
			t.Errorf("re-added service pick = %v, want 3 endpoints", got)
		}
	})

	t.Run("many ports: only changed ones recomputed, removed ones emptied", func(t *testing.T) {
		w := newWorld(t, Config{})
		var svcs []*v1.Service
		var eslices []*discovery.EndpointSlice
		for i, name := range []string{"a", "b", "c", "d", "e"} {
			svcs = append(svcs, service(name))
			eslices = append(eslices, slice(name, name+"-1", ep(fmt.Sprintf("198.19.1.%d", i+1))))
		}
		w.apply(svcs, eslices)
		pickers := map[string]*picker{}
		for _, name := range []string{"e", "a", "c", "d"} { // not b; out of order on purpose
			pickers[name] = w.b.Picker(key(name, Internal, ipfamily.IPv4)).(*picker)
		}
		before := map[string]*pickState{}
		for name, p := range pickers {
			before[name] = p.state.Load()
		}
		w.tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "c"})
		w.tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "e"})
		w.apply(nil, []*discovery.EndpointSlice{slice("d", "d-1", ep("198.19.1.9"))})

		if pickers["a"].state.Load() != before["a"] {
			t.Error("unchanged port a was recomputed")
		}
		for _, name := range []string{"c", "e"} {
			if got := pickers[name].Pick(clientA); len(got) != 0 {
				t.Errorf("removed port %s picks %v, want empty", name, got)
			}
		}
		if got := pickers["d"].Pick(clientA); !cmp.Equal(got, aps("198.19.1.9:8080"), cmpAddrPort) {
			t.Errorf("changed port d picks %v, want [198.19.1.9:8080]", got)
		}
		if got := w.b.Picker(key("b", Internal, ipfamily.IPv4)).Pick(clientA); !cmp.Equal(got, aps("198.19.1.2:8080"), cmpAddrPort) {
			t.Errorf("port b picks %v, want [198.19.1.2:8080]", got)
		}
		var names []string
		for _, pp := range w.b.sorted {
			names = append(names, pp.name.Name)
		}
		if want := []string{"a", "b", "d"}; !cmp.Equal(names, want) || len(w.b.ports) != len(want) {
			t.Errorf("ports with pickers = %v (map %d), want %v", names, len(w.b.ports), want)
		}
	})

	t.Run("picker asked for before the port's first Update fills in", func(t *testing.T) {
		w := newWorld(t, Config{})
		p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
		if got := p.Pick(clientA); len(got) != 0 {
			t.Fatalf("pending picker pick = %v, want empty", got)
		}
		threeBackends(w)
		if got := p.Pick(clientA); len(got) != 3 {
			t.Errorf("after Update pick = %v, want 3 endpoints", got)
		}
	})

	t.Run("same handle for the same key", func(t *testing.T) {
		w := newWorld(t, Config{})
		threeBackends(w)
		if w.b.Picker(key("s", Internal, ipfamily.IPv4)) != w.b.Picker(key("s", Internal, ipfamily.IPv4)) {
			t.Error("two calls for one key returned different pickers")
		}
		if w.b.Picker(key("s", Internal, ipfamily.IPv4)) == w.b.Picker(key("s", External, ipfamily.IPv4)) {
			t.Error("internal and external share a picker")
		}
	})

	t.Run("invalid key gets an empty picker", func(t *testing.T) {
		w := newWorld(t, Config{})
		threeBackends(w)
		p := w.b.Picker(Key{Port: httpPort("s"), Class: 7, Family: "IPv9"})
		p.Connected(clientA, ep1)
		p.Failed(clientA, ep1)
		if got := p.Pick(clientA); len(got) != 0 {
			t.Errorf("invalid key pick = %v, want empty", got)
		}
	})

	t.Run("nil snapshot empties every picker", func(t *testing.T) {
		w := newWorld(t, Config{})
		threeBackends(w)
		p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
		w.b.Update(nil)
		if got := p.Pick(clientA); len(got) != 0 {
			t.Errorf("pick after Update(nil) = %v, want empty", got)
		}
	})
}

// TestConcurrentUse runs picks, pins and updates together; run with -race.
func TestConcurrentUse(t *testing.T) {
	w := newWorld(t, Config{MaxAffinityEntries: 8, Clock: clock.RealClock{}})
	threeBackends(w, affinity(1))
	keys := []Key{key("s", Internal, ipfamily.IPv4), key("s", External, ipfamily.IPv4)}
	valid := map[netip.AddrPort]bool{}
	for i := 1; i <= 4; i++ {
		valid[netip.MustParseAddrPort(fmt.Sprintf("198.19.1.%d:8080", i))] = true
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for g := range 6 {
		wg.Go(func() {
			p := w.b.Picker(keys[g%len(keys)])
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				client := netip.AddrFrom4([4]byte{198, 19, 9, byte(i % 32)})
				got := p.Pick(client)
				for _, a := range got {
					if !valid[a] {
						errs <- fmt.Errorf("picked unknown endpoint %v", a)
						return
					}
				}
				if len(got) > 0 {
					if i%3 == 0 {
						p.Failed(client, got[0])
					} else {
						p.Connected(client, got[0])
					}
				}
			}
		})
	}
	for i := range 200 {
		eps := []discovery.Endpoint{ep("198.19.1.1"), ep("198.19.1.2")}
		if i%2 == 0 {
			eps = append(eps, ep("198.19.1.3"), ep("198.19.1.4"))
		}
		w.apply(nil, []*discovery.EndpointSlice{slice("s", "s-1", eps...)})
		w.b.Sweep(time.Now())
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	held := 0
	for _, k := range keys {
		switch p := w.b.Picker(k).(type) {
		case *picker:
			held += len(p.aff.byClient)
		case *externalPicker:
			held += len(p.ext.aff.byClient) + len(p.fromNode.aff.byClient)
		}
	}
	if n := w.b.AffinityEntries(); n != held || n > 2*8 {
		t.Errorf("affinity entries gauge = %d, tables hold %d, limit %d", n, held, 2*8)
	}
}

func TestRunSweeperStopsWithContext(t *testing.T) {
	w := newWorld(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		w.b.RunSweeper(ctx, time.Millisecond)
		close(done)
	}()
	cancel()
	<-done // a RunSweeper that ignored ctx would hang the test here
}

// A picker says whether its traffic keeps the client's address as
// kube-proxy's NAT would: a cluster IP's always, an external address's only
// under externalTrafficPolicy: Local; and it follows a policy change.
func TestKeepsSource(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []svcOpt
		class Class
		want  bool
	}{
		{"cluster IP", nil, Internal, true},
		{"NodePort, Cluster policy", []svcOpt{func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		}}, External, false},
		{"NodePort, Local policy", []svcOpt{etpLocalNodePort}, External, true},
		{"cluster IP of a Local-policy NodePort", []svcOpt{etpLocalNodePort}, Internal, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, Config{})
			w.apply([]*v1.Service{service("s", tc.opts...)}, []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.1", onNode(thisNode)))})
			if got := lb.KeepsSource(w.b.Picker(key("s", tc.class, ipfamily.IPv4))); got != tc.want {
				t.Errorf("KeepsSource = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("follows a policy change", func(t *testing.T) {
		w := newWorld(t, Config{})
		w.apply([]*v1.Service{service("s", etpLocalNodePort)}, []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.1", onNode(thisNode)))})
		p := w.b.Picker(key("s", External, ipfamily.IPv4))
		svc := service("s", etpLocalNodePort)
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
		svc.ResourceVersion = "2"
		w.apply([]*v1.Service{svc}, nil)
		if lb.KeepsSource(p) {
			t.Error("KeepsSource stayed true after the policy became Cluster")
		}
	})
}

// TestExternalFromNodeShortCircuits: under externalTrafficPolicy Local,
// external traffic from this node (its addresses, its pods by the
// detector, and the port's own load-balancer IP, the source of the node's
// connection to it where a local portal makes it local) goes to every
// cluster endpoint, as kube-proxy's short-circuit sends it; other clients
// get this node's endpoints only, and a Cluster policy changes nothing.
func TestExternalFromNodeShortCircuits(t *testing.T) {
	nodeAddr, pod, outside := netip.MustParseAddr("198.19.0.13"), netip.MustParseAddr("198.19.16.5"), netip.MustParseAddr("198.19.200.1")
	ingress, otherIngress := netip.MustParseAddr("198.18.7.2"), netip.MustParseAddr("198.18.7.3")
	locals := &LocalClients{Addrs: map[netip.Addr]bool{nodeAddr: true}, Pods: &nodepods.Set{Known: []netip.Prefix{netip.MustParsePrefix("198.19.16.0/24")}}}
	remoteOnly := []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.1", onNode("node-b")), ep("198.19.1.2", onNode("node-b")))}
	mixed := []*discovery.EndpointSlice{slice("s", "s-1", ep("198.19.1.1", onNode(thisNode)), ep("198.19.1.2", onNode("node-b")))}
	all := aps("198.19.1.1:8080", "198.19.1.2:8080")
	for _, tc := range []struct {
		name   string
		opts   []svcOpt
		slices []*discovery.EndpointSlice
		locals *LocalClients
		client netip.Addr
		want   []netip.AddrPort
	}{
		{"Local, no local endpoint: an outside client gets none", []svcOpt{etpLocalNodePort}, remoteOnly, locals, outside, nil},
		{"Local, no local endpoint: the node gets every endpoint", []svcOpt{etpLocalNodePort}, remoteOnly, locals, nodeAddr, all},
		{"Local, no local endpoint: a pod gets every endpoint", []svcOpt{etpLocalNodePort}, remoteOnly, locals, pod, all},
		{"Local: an outside client gets the local endpoint", []svcOpt{etpLocalNodePort}, mixed, locals, outside, aps("198.19.1.1:8080")},
		{"Local: the node gets every endpoint", []svcOpt{etpLocalNodePort}, mixed, locals, nodeAddr, all},
		{"Local, no local clients known: no short-circuit", []svcOpt{etpLocalNodePort}, remoteOnly, nil, nodeAddr, nil},
		{"Local, no local endpoint: the node's connection to the port's own load-balancer IP gets every endpoint",
			[]svcOpt{etpLocalNodePort, lbIngress(ingress.String())}, remoteOnly, nil, ingress, all},
		{"Local, no local endpoint: another service's load-balancer IP is not the node", []svcOpt{etpLocalNodePort, lbIngress(ingress.String())},
			remoteOnly, nil, otherIngress, nil},
		{"Cluster, no local endpoint needed: the load-balancer IP gets every endpoint", []svcOpt{lbIngress(ingress.String())}, remoteOnly, nil, ingress, all},
		{"Cluster: every client gets every endpoint", nil, mixed, locals, outside, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, Config{})
			w.b.SetLocalClients(tc.locals)
			w.apply([]*v1.Service{service("s", tc.opts...)}, tc.slices)
			p := w.b.Picker(key("s", External, ipfamily.IPv4))
			got := slices.Clone(p.Pick(tc.client))
			slices.SortFunc(got, netip.AddrPort.Compare)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Pick(%v) = %v, want %v", tc.client, got, tc.want)
			}
		})
	}
}
