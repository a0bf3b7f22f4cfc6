// Package balancer chooses endpoints for the userspace data plane. A
// Balancer is fed every service-map snapshot and hands out one lb.Picker per
// service port, traffic class and address family; relays keep their picker
// for as long as they run, and it follows every later Update.
//
// Eligibility follows kube-proxy: ready endpoints, serving-terminating ones
// only when no endpoint is ready, this node's endpoints only under a Local
// traffic policy (internalTrafficPolicy for cluster IPs, externalTrafficPolicy
// for NodePorts, external and load-balancer IPs), and topology hints. Pick is
// lock-free round-robin unless ClientIP affinity is on.
package balancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/nodepods"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/runner"
	"kproxy.dev/kproxy/sync/servicemap"
)

// DefaultMaxAffinityEntries bounds the ClientIP affinity pins kept per picker
// when Config.MaxAffinityEntries is 0: about 1.5 MiB at 100 bytes a pin.
const DefaultMaxAffinityEntries = 16384

// Class is the traffic class of a destination, which decides the traffic
// policy that applies.
type Class uint8

const (
	// Internal is traffic to a cluster IP: internalTrafficPolicy applies.
	Internal Class = iota
	// External is traffic to a NodePort, external IP or load-balancer IP:
	// externalTrafficPolicy applies.
	External
	// ExternalFromNode is External traffic that starts on this node: from
	// one of its addresses, or from a pod by the local-traffic detector
	// (SetLocalClients). Under externalTrafficPolicy Local kube-proxy
	// short-circuits it to the service's cluster-wide endpoints, as if it
	// had come in through an outside load balancer; an External picker
	// hands such clients to this class's.
	ExternalFromNode
	numClasses
)

func (c Class) String() string {
	switch c {
	case Internal:
		return "internal"
	case External:
		return "external"
	case ExternalFromNode:
		return "external-from-node"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Key names one picker.
type Key struct {
	Port  servicemap.ServicePortName
	Class Class
	// Family: a client only reaches endpoints of its own family.
	Family ipfamily.Family
}

func (k Key) String() string { return fmt.Sprintf("%s/%s/%s", k.Port, k.Class, k.Family) }

func (k Key) valid() bool {
	return k.Class < numClasses && (k.Family == ipfamily.IPv4 || k.Family == ipfamily.IPv6)
}

// Config configures a Balancer. The zero value works.
type Config struct {
	// NodeName is this node's name, for node topology hints; when empty the
	// snapshot's Node name is used.
	NodeName string
	// MaxAffinityEntries bounds the ClientIP affinity pins per picker; the
	// least recently used pin is dropped to make room. 0 means
	// DefaultMaxAffinityEntries.
	MaxAffinityEntries int
	// Clock measures affinity timeouts; nil means the wall clock.
	Clock clock.PassiveClock
	// Registerer, when set, gets the balancer's metrics.
	Registerer prometheus.Registerer
}

// Balancer keeps one picker per Key that has been asked for and keeps them
// current with the snapshots given to Update. It is safe for concurrent use.
type Balancer struct {
	nodeName    string
	maxAffinity int
	clk         epochClock
	stats       stats

	// local are the clients that count as this node's (SetLocalClients).
	local atomic.Pointer[LocalClients]

	mu    sync.Mutex // guards the fields below; never taken by Pick
	snap  *servicemap.Snapshot
	topo  servicemap.Topology
	ports map[servicemap.ServicePortName]*portPickers
	// sorted holds the values of ports in name order, for Update's walk.
	sorted []*portPickers
}

// portPickers are the pickers handed out for one service port, with the
// ServicePort their states were computed from (nil before the port was seen).
type portPickers struct {
	name    servicemap.ServicePortName
	sp      *servicemap.ServicePort
	pickers [numClasses][2]*picker // by class, then family index
	// external are the External class's handles, by family index: its
	// picker and ExternalFromNode's behind one.
	external [2]*externalPicker
}

// New returns a Balancer with no service ports; call Update with a snapshot.
func New(cfg Config) (*Balancer, error) {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	maxAffinity := cfg.MaxAffinityEntries
	if maxAffinity <= 0 {
		maxAffinity = DefaultMaxAffinityEntries
	}
	b := &Balancer{
		nodeName:    cfg.NodeName,
		maxAffinity: maxAffinity,
		clk:         epochClock{clock: clk, epoch: clk.Now()},
		topo:        servicemap.Topology{NodeName: cfg.NodeName},
		ports:       map[servicemap.ServicePortName]*portPickers{},
	}
	if cfg.Registerer != nil {
		if err := b.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("registering balancer metrics: %w", err)
		}
	}
	return b, nil
}

func (b *Balancer) register(reg prometheus.Registerer) error {
	collectors := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "kproxy", Subsystem: "userspace", Name: "affinity_entries",
			Help: "ClientIP session-affinity pins currently held by the userspace balancer",
		}, func() float64 { return float64(b.stats.entries.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "kproxy", Subsystem: "userspace", Name: "affinity_evictions_total",
			Help: "ClientIP session-affinity pins dropped before expiry because a service port reached its pin limit",
		}, func() float64 { return float64(b.stats.evictions.Load()) }),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Update makes every picker reflect snap. Pickers of ports whose
// *ServicePort is the same as before (snapshots share unchanged ports) are
// not touched; a changed port's pickers keep their round-robin position and
// every affinity pin whose endpoint is still eligible. Pickers of ports that
// are gone return no endpoints from now on and are forgotten: a port that
// comes back gets new pickers.
//
// The ports with pickers are walked in name order alongside the snapshot's
// sorted ports, so an unchanged port costs one pointer comparison.
func (b *Balancer) Update(snap *servicemap.Snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	topo := servicemap.TopologyOf(b.nodeName, snap)
	topoChanged := topo != b.topo
	b.snap, b.topo = snap, topo

	removed := 0
	i := 0
	for name, sp := range snap.All() {
		for i < len(b.sorted) {
			pp := b.sorted[i]
			if pp.sp == sp { // same port, unchanged
				if topoChanged && sp.UsesHints() {
					pp.recompute(topo)
				}
				i++
				break
			}
			c := pp.name.Compare(name)
			if c > 0 {
				break // sp has no pickers
			}
			if c == 0 {
				pp.sp = sp
				pp.recompute(topo)
				i++
				break
			}
			b.retire(pp) // pp's port is not in snap
			removed++
			i++
		}
	}
	for ; i < len(b.sorted); i++ {
		b.retire(b.sorted[i])
		removed++
	}
	if removed > 0 {
		b.sorted = slices.DeleteFunc(b.sorted, func(pp *portPickers) bool { return b.ports[pp.name] != pp })
	}
}

// retire empties the pickers of a port that left the snapshot and forgets them.
func (b *Balancer) retire(pp *portPickers) {
	pp.sp = nil
	pp.recompute(b.topo)
	delete(b.ports, pp.name)
}

// recompute refreshes every picker of the port from pp.sp.
func (pp *portPickers) recompute(topo servicemap.Topology) {
	for c := range numClasses {
		for _, f := range ipfamily.All() {
			if p := pp.pickers[c][f.Index()]; p != nil {
				p.apply(eligibleFor(pp.sp, Key{Port: pp.name, Class: c, Family: f}, topo))
			}
		}
	}
}

// Picker returns the picker of key; every call for one key returns the same
// handle until the port leaves the snapshot. A port not in the last Update's
// snapshot gets a picker that stays empty unless the next Update brings the
// port. Pick on it is safe for concurrent use and does not allocate.
func (b *Balancer) Picker(key Key) lb.Picker {
	if !key.valid() {
		return newPicker(&b.clk, &b.stats, 0)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	pp := b.ports[key.Port]
	if pp == nil {
		sp, _ := b.snap.Get(key.Port)
		pp = &portPickers{name: key.Port, sp: sp}
		b.ports[key.Port] = pp
		i, _ := slices.BinarySearchFunc(b.sorted, key.Port, func(e *portPickers, n servicemap.ServicePortName) int {
			return e.name.Compare(n)
		})
		b.sorted = slices.Insert(b.sorted, i, pp)
	}
	if key.Class == External {
		fi := key.Family.Index()
		if pp.external[fi] == nil {
			fromNode := key
			fromNode.Class = ExternalFromNode
			pp.external[fi] = &externalPicker{ext: b.pickerLocked(pp, key), fromNode: b.pickerLocked(pp, fromNode), local: &b.local}
		}
		return pp.external[fi]
	}
	return b.pickerLocked(pp, key)
}

// pickerLocked returns pp's picker of key, made on first use.
func (b *Balancer) pickerLocked(pp *portPickers, key Key) *picker {
	p := pp.pickers[key.Class][key.Family.Index()]
	if p == nil {
		p = newPicker(&b.clk, &b.stats, b.maxAffinity)
		p.apply(eligibleFor(pp.sp, key, b.topo))
		pp.pickers[key.Class][key.Family.Index()] = p
	}
	return p
}

// LocalClients are the clients whose external traffic starts on this node:
// kube-proxy's "LOCAL" source addresses (the node's own) and this node's
// pods (lb/nodepods; kube-proxy's detector matches every node's pods, whose
// replies would bypass a relay that served them here).
type LocalClients struct {
	Addrs map[netip.Addr]bool
	Pods  *nodepods.Set
}

// Contains says whether client is one of them.
func (l *LocalClients) Contains(client netip.Addr) bool {
	if l == nil {
		return false
	}
	client = client.Unmap()
	return l.Addrs[client] || l.Pods.Contains(client)
}

// SetLocalClients replaces the clients External pickers short-circuit under
// externalTrafficPolicy Local; nil short-circuits none.
func (b *Balancer) SetLocalClients(l *LocalClients) { b.local.Store(l) }

// Sweep drops every affinity pin that expired as of now and returns how many.
// Pins also expire lazily when looked up; Sweep bounds the memory of clients
// that never come back. The owner calls it periodically (see RunSweeper).
func (b *Balancer) Sweep(now time.Time) int {
	at := b.clk.at(now)
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, pp := range b.ports {
		for c := range numClasses {
			for f := range pp.pickers[c] {
				if p := pp.pickers[c][f]; p != nil {
					n += p.expire(at)
				}
			}
		}
	}
	return n
}

// RunSweeper calls Sweep every interval until ctx is done.
func (b *Balancer) RunSweeper(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = time.Minute
	}
	runner.Every(ctx, every, func() { b.Sweep(b.clk.clock.Now()) })
}

// AffinityEntries is the number of affinity pins held over all pickers.
func (b *Balancer) AffinityEntries() int { return int(b.stats.entries.Load()) }

// AffinityEvictions is the number of pins dropped because a picker was full.
func (b *Balancer) AffinityEvictions() uint64 { return b.stats.evictions.Load() }
