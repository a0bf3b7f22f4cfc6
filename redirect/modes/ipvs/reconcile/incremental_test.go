package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/sync/servicemap"
)

// writeOps are the operations that change the kernel; the others read it
// (or, like EnsureLink and Create, only make sure something exists).
var writeOps = []string{"NewService", "UpdateService", "DelService", "NewDestination", "UpdateDestination",
	"DelDestination", "AddAddr", "DelAddr", "Add", "Del"}

// writes returns the rig's write operations since its last reset, sorted.
func (g *rig) writes() []string {
	var out []string
	for _, op := range g.ops() {
		name, _, _ := strings.Cut(op, " ")
		if slices.Contains(writeOps, name) {
			out = append(out, op)
		}
	}
	slices.Sort(out)
	return out
}

// normalized sorts a result's lists, whose order follows map iteration
// on some paths.
func normalized(res Result) Result {
	slices.SortFunc(res.RemovedVirtualServers, desired.Key.Compare)
	slices.SortFunc(res.RemovedRealServers, func(a, b RealServerRef) int {
		return cmp.Or(a.VirtualServer.Compare(b.VirtualServer), a.RealServer.Compare(b.RealServer))
	})
	return res
}

// twin runs the same states through an incremental reconciler and one that
// re-reads the kernel on every sync, the way every sync worked before
// unchanged services were skipped.
type twin struct{ inc, full *rig }

func newTwin(t *testing.T) twin { return twin{inc: newRig(t), full: newRig(t)} }

// sync applies st to both and fails unless they make the same writes, end
// with the same result and leave the same kernel.
func (w twin) sync(t *testing.T, step string, st *desired.State) {
	t.Helper()
	w.inc.resetCounts()
	w.full.resetCounts()
	incRes, incErr := w.inc.r.Sync(context.Background(), st, false)
	fullRes, fullErr := w.full.r.Sync(context.Background(), st, true)
	if incErr != nil || fullErr != nil {
		t.Fatalf("%s: incremental sync: %v; full sync: %v", step, incErr, fullErr)
	}
	if got, want := w.inc.writes(), w.full.writes(); !slices.Equal(got, want) {
		t.Fatalf("%s: the incremental sync wrote\n\t%s\nthe full sync\n\t%s", step, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	if got, want := fmt.Sprintf("%+v", normalized(incRes)), fmt.Sprintf("%+v", normalized(fullRes)); got != want {
		t.Fatalf("%s: incremental result %s, full %s", step, got, want)
	}
	if got, want := w.inc.dump(), w.full.dump(); got != want {
		t.Fatalf("%s: kernels differ\n--- incremental\n%s--- full\n%s", step, got, want)
	}
}

// setConnections gives a real server connections on both kernels.
func (w twin) setConnections(t *testing.T, k desired.Key, ap netip.AddrPort) {
	t.Helper()
	for _, g := range []*rig{w.inc, w.full} {
		if err := g.ipvs.SetConnections(k, ap, 2, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func (w twin) step(d time.Duration) {
	w.inc.clock.Step(d)
	w.full.clock.Step(d)
}

// world is a small, randomly evolving set of service ports.
type world struct {
	rng   *rand.Rand
	ports []*servicemap.ServicePort // nil where a port is removed
}

func newWorld(seed uint64, n int) *world {
	w := &world{rng: rand.New(rand.NewPCG(seed, 7))}
	for i := range n {
		w.ports = append(w.ports, svc(fmt.Sprintf("p%02d", i), v1.ProtocolTCP, fmt.Sprintf("198.18.1.%d", i+1), 80,
			fmt.Sprintf("198.19.1.%d:8080", i+1), fmt.Sprintf("198.19.2.%d:8080", i+1)))
	}
	return w
}

func (w *world) live() []*servicemap.ServicePort {
	var out []*servicemap.ServicePort
	for _, p := range w.ports {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// mutate changes one port (a copy: built states keep the old one) and
// returns what it did.
func (w *world) mutate() string {
	i := w.rng.IntN(len(w.ports))
	old := w.ports[i]
	if old == nil {
		w.ports[i] = svc(fmt.Sprintf("p%02d", i), v1.ProtocolTCP, fmt.Sprintf("198.18.1.%d", i+1), 80, fmt.Sprintf("198.19.3.%d:8080", i+1))
		return fmt.Sprintf("port %d back", i)
	}
	p := *old
	p.Endpoints = slices.Clone(old.Endpoints)
	ep := servicemap.Endpoint{Addr: netip.AddrFrom4([4]byte{198, 19, byte(4 + w.rng.IntN(3)), byte(i + 1)}), Port: 8080, Ready: true, Serving: true}
	var did string
	switch w.rng.IntN(9) {
	case 0:
		p.Endpoints, did = append(p.Endpoints, ep), "endpoint added"
	case 1:
		if len(p.Endpoints) > 0 {
			j := w.rng.IntN(len(p.Endpoints))
			p.Endpoints, did = slices.Delete(p.Endpoints, j, j+1), "endpoint removed"
		}
	case 2:
		p.AffinityTimeout, did = time.Duration(w.rng.IntN(2))*time.Hour, "affinity toggled"
	case 3:
		p.NodePort, did = uint16(30000+i)*uint16(w.rng.IntN(2)), "node port toggled"
	case 4:
		p.ExternalIPs, did = []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 200, byte(w.rng.IntN(3))})}, "external IP set"
	case 5:
		p.Name.Protocol = []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}[w.rng.IntN(2)]
		did = "protocol set"
	case 6:
		ep.IsLocal, ep.NodeName = true, "node-a"
		p.Endpoints, did = append(p.Endpoints, ep), "local endpoint added"
	case 7:
		w.ports[i] = nil
		return fmt.Sprintf("port %d removed", i)
	default:
		did = "nothing"
	}
	slices.SortFunc(p.Endpoints, func(a, b servicemap.Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) })
	p.Endpoints = slices.CompactFunc(p.Endpoints, func(a, b servicemap.Endpoint) bool { return a.AddrPort() == b.AddrPort() })
	w.ports[i] = &p
	return fmt.Sprintf("port %d: %s", i, did)
}

// TestIncrementalSyncWritesWhatAFullSyncWrites evolves services at random
// (endpoints, affinity, node ports, external IPs, protocols, removals,
// draining connections) and checks that every incremental sync, which
// skips what it applied before, writes exactly what a sync re-reading the
// kernel and visiting everything writes.
func TestIncrementalSyncWritesWhatAFullSyncWrites(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			w, world := newTwin(t), newWorld(seed, 12)
			prev := build(t, cfg(), world.live()...)
			w.sync(t, "first", prev)
			for n := range 60 {
				// Some TCP real servers hold connections, so those
				// retired drain across syncs.
				if s := prev.Services[world.rng.IntN(len(prev.Services))]; s.Protocol == v1.ProtocolTCP && len(s.RealServers) > 0 {
					w.setConnections(t, s.Key, s.RealServers[0].AddrPort())
				}
				var did []string
				for range 1 + world.rng.IntN(3) {
					did = append(did, world.mutate())
				}
				st := build(t, cfg(), world.live()...)
				w.step(time.Duration(world.rng.IntN(40)) * time.Second)
				w.sync(t, fmt.Sprintf("step %d (%s)", n, strings.Join(did, ", ")), st)
				prev = st
			}
		})
	}
}

// TestIncrementalSyncOfIrregularStates feeds states desired.Build never
// makes: services or addresses out of order, a bound service address the
// address list lacks. Incremental syncs must still write what full ones do.
func TestIncrementalSyncOfIrregularStates(t *testing.T) {
	ports := func() []*servicemap.ServicePort {
		return []*servicemap.ServicePort{
			svc("a", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080"),
			svc("b", v1.ProtocolTCP, "198.18.0.2", 80, "198.19.1.12:8080"),
			svc("c", v1.ProtocolUDP, "198.18.0.3", 53, "198.19.1.13:53"),
		}
	}
	tests := []struct {
		name string
		edit func(*desired.State)
	}{
		{"services out of order", func(st *desired.State) { slices.Reverse(st.Services) }},
		{"addresses out of order", func(st *desired.State) { slices.Reverse(st.Addresses) }},
		{"bound address not listed", func(st *desired.State) { st.Addresses = st.Addresses[1:] }},
		{"service listed twice", func(st *desired.State) { st.Services = append(st.Services, st.Services[0]) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTwin(t)
			w.sync(t, "regular", build(t, cfg(), ports()...))
			for i := range 3 {
				st := build(t, cfg(), ports()...)
				tt.edit(st)
				w.sync(t, fmt.Sprintf("irregular %d", i), st)
			}
			changed := ports()
			changed[1] = svc("b", v1.ProtocolTCP, "198.18.0.2", 80, "198.19.1.14:8080")
			w.sync(t, "regular again", build(t, cfg(), changed...))
		})
	}
}

// TestIncrementalSyncAcrossConfigChanges changes what every service or
// some services' Bind depend on: the scheduler, and whether an external IP
// is a local address (bound to kube-ipvs0 only when it is not).
func TestIncrementalSyncAcrossConfigChanges(t *testing.T) {
	ext := svc("ext", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080")
	ext.ExternalIPs, ext.NodePort = addrs("198.18.200.1"), 30080
	ports := []*servicemap.ServicePort{ext, svc("other", v1.ProtocolUDP, "198.18.0.2", 53, "198.19.1.12:53")}
	local := cfg()
	local.LocalAddrs = append(local.LocalAddrs, mustAddr("198.18.200.1"))
	rr := cfg()
	rr.Scheduler = "wrr"
	w := newTwin(t)
	for _, step := range []struct {
		name string
		c    desired.Config
	}{
		{"initial", cfg()},
		{"external IP becomes local", local},
		{"external IP stops being local", cfg()},
		{"scheduler changes", rr},
		{"scheduler back", cfg()},
	} {
		w.sync(t, step.name, build(t, step.c, ports...))
	}
}

// TestPlanVisitsOnlyChanges looks at what an incremental sync plans to
// visit after a first sync applied base: only what differs.
func TestPlanVisitsOnlyChanges(t *testing.T) {
	base := func() []*servicemap.ServicePort { return manyPorts(6, 2) }
	keyOf := func(i int) desired.Key {
		return desired.Key{Addr: netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}), Protocol: v1.ProtocolTCP, Port: 80}
	}
	tests := []struct {
		name     string
		edit     func(ports []*servicemap.ServicePort) []*servicemap.ServicePort
		unbound  bool
		visits   []visit
		unwanted []unwanted
		record   bool
	}{
		{name: "nothing changed", edit: nil, record: true},
		{
			name: "one endpoint",
			edit: func(ps []*servicemap.ServicePort) []*servicemap.ServicePort {
				ps[3] = svc(ps[3].Name.Name, v1.ProtocolTCP, "198.18.0.3", 80, "198.19.9.9:80")
				return ps
			},
			visits: []visit{{3, 3}}, record: true,
		},
		{
			name:     "a service removed",
			edit:     func(ps []*servicemap.ServicePort) []*servicemap.ServicePort { return slices.Delete(ps, 2, 3) },
			unwanted: []unwanted{{keyOf(2), 2}}, record: true,
		},
		{
			name: "a service added",
			edit: func(ps []*servicemap.ServicePort) []*servicemap.ServicePort {
				return append(ps, svc("new", v1.ProtocolTCP, "198.18.0.10", 80))
			},
			visits: []visit{{6, -1}}, record: true,
		},
		{
			name: "addresses unbound: only services whose own address is gone",
			edit: nil, unbound: true, record: true,
			visits: []visit{{4, 4}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			g.sync(t, build(t, cfg(), base()...))
			ports := base()
			if tt.edit != nil {
				ports = tt.edit(ports)
			}
			if tt.unbound {
				delete(g.r.cur.addrs, keyOf(4).Addr)
			}
			st := build(t, cfg(), ports...)
			p := g.r.planServices(st, tt.unbound)
			if !slices.Equal(p.visits, tt.visits) || !slices.Equal(p.unwanted, tt.unwanted) || p.record != tt.record {
				t.Errorf("plan visits %v, unwanted %v, record %v; want %v, %v, %v", p.visits, p.unwanted, p.record, tt.visits, tt.unwanted, tt.record)
			}
			// Once applied, the same state plans nothing.
			g.sync(t, st)
			if p := g.r.planServices(st, false); len(p.visits) != 0 || len(p.unwanted) != 0 || !p.record {
				t.Errorf("after applying the change, the plan is %+v, want nothing to do", p)
			}
		})
	}
}

// TestPlanAfterReadVisitsEverything: a full sync reads the kernel and
// trusts no record, and out-of-order services are not recorded.
func TestPlanAfterReadVisitsEverything(t *testing.T) {
	tests := []struct {
		name    string
		reverse bool
		record  bool
	}{
		{"in order", false, true},
		{"out of order", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			st := build(t, cfg(), manyPorts(4, 1)...)
			g.sync(t, st)
			cur, err := g.r.read()
			if err != nil {
				t.Fatal(err)
			}
			g.r.cur = cur
			if tt.reverse {
				slices.Reverse(st.Services)
			}
			p := g.r.planServices(st, false)
			if len(p.visits) != 4 || len(p.unwanted) != 0 || p.record != tt.record {
				t.Errorf("plan %+v, want 4 visits, nothing unwanted, record %v", p, tt.record)
			}
		})
	}
}

// TestOneChangeCostDoesNotGrowWithServices: a sync that changes one
// endpoint allocates as much among 2,000 services as among 100 (it used to
// allocate a map per service).
func TestOneChangeCostDoesNotGrowWithServices(t *testing.T) {
	allocs := func(n int) float64 {
		g := newRig(t)
		base := manyPorts(n, 3)
		states := make([]*desired.State, 2)
		for i := range states {
			ports := slices.Clone(base)
			ports[0] = svc(base[0].Name.Name, v1.ProtocolTCP, "198.18.0.0", 80, fmt.Sprintf("198.19.250.%d:80", i+1))
			states[i] = build(t, cfg(), ports...)
		}
		g.sync(t, states[0])
		g.setHook(nil)
		syncs := 0
		return testing.AllocsPerRun(20, func() {
			syncs++
			g.sync(t, states[syncs%2])
		})
	}
	small, large := allocs(100), allocs(2000)
	if large > small+2 {
		t.Errorf("one endpoint change: %.0f allocations among 2000 services, %.0f among 100", large, small)
	}
}

// TestStateChangedInPlaceIsApplied: the caller may reuse a state; what was
// applied is the reconciler's own copy, so changes made in place show.
func TestStateChangedInPlaceIsApplied(t *testing.T) {
	g := newRig(t)
	st := build(t, cfg(), svc("web", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080"))
	g.sync(t, st)
	st.Services[0].RealServers[0].Weight = 5
	g.resetCounts()
	g.sync(t, st)
	if want := []string{"UpdateDestination TCP/198.18.0.1:80 -> 198.19.1.11:8080"}; !slices.Equal(g.ops(), want) {
		t.Errorf("operations %v, want %v", g.ops(), want)
	}
}

// TestCancelledSyncFails even when nothing changed: a cancelled sync is
// never reported complete.
func TestCancelledSyncFails(t *testing.T) {
	g := newRig(t)
	st := build(t, cfg(), svc("web", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080"))
	g.sync(t, st)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.r.Sync(ctx, st, false); err == nil {
		t.Error("Sync with a cancelled context succeeded")
	}
}
