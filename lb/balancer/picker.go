package balancer

import (
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// pickState is one immutable generation of a picker's eligible endpoints.
// ring holds them twice in a row, so ring[i:i+n] is the rotation starting at
// endpoint i: Pick hands out sub-slices of it without allocating.
type pickState struct {
	ring []netip.AddrPort
	n    int
	// timeout is the ClientIP affinity timeout in nanoseconds, 0 when off.
	timeout int64
	// index maps each eligible endpoint to its position; only built when
	// affinity is on, as only pinned picks need it.
	index map[netip.AddrPort]int
	// keepsSource: kube-proxy would not masquerade this traffic (a
	// cluster IP's, or external under a Local policy), so the relays keep
	// the client's address where they can.
	keepsSource bool
	// shortCircuit: external traffic under a Local policy, whose clients on
	// this node go to the cluster-wide endpoints (ExternalFromNode).
	shortCircuit bool
	// ownAddrs are the port's external and load-balancer IPs. A client
	// with one of them as its source is the node itself: where a local
	// portal makes the address local, the kernel gives a connection to it
	// that address as its source (IPv4 drops a packet from outside that
	// claims it as a martian; an IPv6 one gets no answer back).
	ownAddrs []netip.Addr
}

func newPickState(eps []netip.AddrPort, affinity time.Duration) *pickState {
	st := &pickState{n: len(eps), timeout: int64(affinity)}
	if st.n == 0 {
		return st
	}
	st.ring = make([]netip.AddrPort, 2*st.n)
	copy(st.ring, eps)
	copy(st.ring[st.n:], eps)
	if st.timeout > 0 {
		st.index = make(map[netip.AddrPort]int, st.n)
		for i, ep := range eps {
			st.index[ep] = i
		}
	}
	return st
}

// sameAs says st would hand out exactly what o does.
func (st *pickState) sameAs(o *pickState) bool {
	if st.n != o.n || st.timeout != o.timeout || st.keepsSource != o.keepsSource || st.shortCircuit != o.shortCircuit ||
		!slices.Equal(st.ownAddrs, o.ownAddrs) {
		return false
	}
	for i := range st.n {
		if st.ring[i] != o.ring[i] {
			return false
		}
	}
	return true
}

// rotation returns the eligible endpoints starting at i, capped so a caller's
// append cannot write into the ring.
func (st *pickState) rotation(i int) []netip.AddrPort { return st.ring[i : i+st.n : i+st.n] }

// picker is the lb.Picker of one Key. The balancer swaps its state on Update;
// the round-robin cursor and the affinity table outlive state swaps, so a
// sync that does not change a port's eligible endpoints changes nothing a
// client can observe.
type picker struct {
	state  atomic.Pointer[pickState]
	cursor atomic.Uint64
	clk    *epochClock
	stats  *stats
	aff    affinityTable
}

var _ lb.Picker = (*picker)(nil)

func newPicker(clk *epochClock, st *stats, maxAffinity int) *picker {
	p := &picker{clk: clk, stats: st}
	p.aff.max = maxAffinity
	p.state.Store(&pickState{})
	return p
}

// KeepsSource implements lb.SourceKeeper.
func (p *picker) KeepsSource() bool { return p.state.Load().keepsSource }

// Pick implements lb.Picker. The returned slice is shared with other callers
// and later picks: callers must not modify it (appending is safe, it has no
// spare capacity).
func (p *picker) Pick(client netip.Addr) []netip.AddrPort {
	st := p.state.Load()
	if st.n == 0 {
		return nil
	}
	if st.timeout > 0 {
		if i, ok := p.pinned(client.Unmap(), st); ok {
			return st.rotation(i)
		}
	}
	if st.n == 1 {
		return st.rotation(0)
	}
	return st.rotation(int((p.cursor.Add(1) - 1) % uint64(st.n)))
}

// pinned looks client's pin up, refreshing it on use.
func (p *picker) pinned(client netip.Addr, st *pickState) (int, bool) {
	now := p.clk.nanos()
	p.aff.mu.Lock()
	i, ok, dropped := p.aff.pinnedLocked(client, now, st.timeout, st.index)
	p.aff.mu.Unlock()
	if dropped > 0 {
		p.stats.entries.Add(-int64(dropped))
	}
	return i, ok
}

// Connected implements lb.Picker: with ClientIP affinity on, it pins client to
// endpoint (or refreshes the pin) until the affinity timeout passes unused.
// Endpoints that are not eligible any more are not pinned.
func (p *picker) Connected(client netip.Addr, endpoint netip.AddrPort) {
	st := p.state.Load()
	if st.timeout == 0 {
		return
	}
	if _, ok := st.index[endpoint]; !ok {
		return
	}
	now := p.clk.nanos()
	p.aff.mu.Lock()
	added, evicted := p.aff.pinLocked(client.Unmap(), endpoint, now)
	p.aff.mu.Unlock()
	p.stats.entries.Add(int64(added - evicted))
	if evicted > 0 {
		p.stats.evictions.Add(uint64(evicted))
	}
}

// Failed implements lb.Picker: a pin of client to endpoint is dropped, so the
// client's next pick round-robins.
func (p *picker) Failed(client netip.Addr, endpoint netip.AddrPort) {
	if p.state.Load().timeout == 0 {
		return
	}
	p.aff.mu.Lock()
	dropped := p.aff.unpinLocked(client.Unmap(), endpoint)
	p.aff.mu.Unlock()
	if dropped {
		p.stats.entries.Add(-1)
	}
}

// apply installs a new state, keeping the old one when nothing observable
// changed, and drops pins the new state makes invalid.
func (p *picker) apply(st *pickState) {
	if old := p.state.Load(); st.sameAs(old) {
		return
	}
	p.state.Store(st)
	p.aff.mu.Lock()
	var dropped int
	if st.timeout == 0 {
		dropped = p.aff.clearLocked()
	} else {
		dropped = p.aff.retainLocked(st.index)
	}
	p.aff.mu.Unlock()
	p.stats.entries.Add(-int64(dropped))
}

// expire drops pins unused for the affinity timeout as of now.
func (p *picker) expire(now int64) int {
	st := p.state.Load()
	if st.timeout == 0 {
		return 0
	}
	p.aff.mu.Lock()
	n := p.aff.expireLocked(now, st.timeout)
	p.aff.mu.Unlock()
	p.stats.entries.Add(-int64(n))
	return n
}

// eligibleFor computes a picker's state for key from sp.
func eligibleFor(sp *servicemap.ServicePort, key Key, topo servicemap.Topology) *pickState {
	if sp == nil {
		return &pickState{}
	}
	st := newPickState(eligibleEndpoints(sp, key.Class, key.Family, topo), sp.AffinityTimeout)
	// Short-circuited pod traffic keeps its address too; the node's own is
	// masqueraded, which a dial from the node does (keepsource.Keeps).
	st.keepsSource = key.Class != External || sp.ExternalPolicyLocal
	st.shortCircuit = key.Class == External && sp.ExternalPolicyLocal
	if st.shortCircuit {
		st.ownAddrs = append(ipfamily.Addrs(sp.ExternalIPs, key.Family), ipfamily.Addrs(sp.LoadBalancerIPs, key.Family)...)
	}
	return st
}

// externalPicker is the lb.Picker of an External key: its own picker, and
// for clients on this node under a Local policy, ExternalFromNode's. One
// client always goes to one of the two, so its affinity pins stay in one.
type externalPicker struct {
	ext, fromNode *picker
	local         *atomic.Pointer[LocalClients]
}

var _ lb.Picker = (*externalPicker)(nil)

// of returns the picker that serves client.
func (e *externalPicker) of(client netip.Addr) *picker {
	if st := e.ext.state.Load(); st.shortCircuit && (slices.Contains(st.ownAddrs, client.Unmap()) || e.local.Load().Contains(client)) {
		return e.fromNode
	}
	return e.ext
}

func (e *externalPicker) Pick(client netip.Addr) []netip.AddrPort { return e.of(client).Pick(client) }
func (e *externalPicker) Connected(client netip.Addr, ep netip.AddrPort) {
	e.of(client).Connected(client, ep)
}
func (e *externalPicker) Failed(client netip.Addr, ep netip.AddrPort) {
	e.of(client).Failed(client, ep)
}

// KeepsSource implements lb.SourceKeeper: both classes keep it under a
// Local policy, neither under Cluster.
func (e *externalPicker) KeepsSource() bool { return e.ext.KeepsSource() }

// epochClock measures time in nanoseconds since the balancer was made, so
// affinity entries hold an int64 (monotonic with the real clock).
type epochClock struct {
	clock clock.PassiveClock
	epoch time.Time
}

func (c *epochClock) nanos() int64         { return c.at(c.clock.Now()) }
func (c *epochClock) at(t time.Time) int64 { return int64(t.Sub(c.epoch)) }

// stats are the balancer's counters, kept in atomics so the hot path never
// touches a Prometheus collector.
type stats struct {
	entries   atomic.Int64
	evictions atomic.Uint64
}
