// Package selfdial remembers the relays' own outgoing TCP connections and
// SCTP associations by their local address, so that a relay can tell a connection coming back
// from kproxy itself from a client's: a service whose endpoint leads back
// into kproxy (its own cluster IP, a NodePort on a node address, another
// service's address that leads back in turn) would otherwise make the relays
// dial themselves until the process runs out of descriptors.
//
// Why by address pair: whatever a portal does to the destination (REDIRECT,
// DNAT to the node's address, or nothing for a local portal), a connection
// the node opens to itself keeps its source, so the peer of the accepted
// socket is the local address of the socket the relay dialed, and the
// address the relay dialed is the accepted socket's original destination
// (a REDIRECT portal's) or its local address (a local portal's). That holds
// for any path back in, through any number of services, without knowing
// which addresses kproxy serves. The source alone would not do: the kernel
// gives one local port to connections to different destinations, so a
// client on the node may have the source of one of the relays' dials.
//
// An SCTP association is kept like a TCP connection (Add, Returning): its
// local address is the one the INIT left from, which the association
// coming back has as its peer.
//
// UDP flows are kept by their source alone (AddFlow): a UDP relay cannot
// read a redirected datagram's original destination, and need not, since
// the kernel gives a UDP socket's port to no other socket of its address.
package selfdial

import (
	"net/netip"
	"sync"
	"time"
)

// shards spreads the dials over locks, so the event loops of every relay
// seldom wait for each other.
const shards = 64

// relogAfter: a service port that still loops this long after it was
// logged is logged again.
const relogAfter = 10 * time.Minute

// Dial is one outgoing connection of a relay.
type Dial struct {
	// From names the relay that dialed (its service port).
	From string
	// Endpoint is the address it dialed.
	Endpoint netip.AddrPort
}

// Dials is the set of the relays' outgoing connections, safe for concurrent
// use. A nil *Dials remembers nothing and finds no loop.
type Dials struct {
	shard [shards]struct {
		mu    sync.Mutex
		dials map[pair]Dial
	}

	mu     sync.Mutex
	logged map[string]time.Time
}

// New returns an empty set.
func New() *Dials {
	d := &Dials{logged: map[string]time.Time{}}
	for i := range d.shard {
		d.shard[i].dials = map[pair]Dial{}
	}
	return d
}

// pair is an outgoing connection's local address and the address it
// dialed, IPv4-mapped addresses unmapped.
type pair struct{ local, remote netip.AddrPort }

func pairOf(local, remote netip.AddrPort) pair {
	unmap := func(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }
	return pair{unmap(local), unmap(remote)}
}

func (d *Dials) shardOf(p pair) int { return int(p.local.Port()) % shards }

// Add remembers an outgoing TCP connection from local to dial.Endpoint,
// from the moment its connect starts.
func (d *Dials) Add(local netip.AddrPort, dial Dial) { d.put(pairOf(local, dial.Endpoint), dial) }

// Remove forgets the TCP connection from local to endpoint; call it before
// closing the socket, so that its addresses are never taken for another
// connection's.
func (d *Dials) Remove(local, endpoint netip.AddrPort) { d.del(pairOf(local, endpoint)) }

// Returning says whether a TCP connection accepted from peer, addressed to
// dst (before any portal rewrote it), is one of the relays' own outgoing
// connections, and which.
func (d *Dials) Returning(peer, dst netip.AddrPort) (Dial, bool) { return d.get(pairOf(peer, dst)) }

// AddFlow remembers a UDP flow's socket by its local address alone.
func (d *Dials) AddFlow(local netip.AddrPort, dial Dial) {
	d.put(pairOf(local, netip.AddrPort{}), dial)
}

// RemoveFlow forgets a UDP flow's socket; call it before closing it.
func (d *Dials) RemoveFlow(local netip.AddrPort) { d.del(pairOf(local, netip.AddrPort{})) }

// ReturningFlow says whether a UDP datagram from peer was sent by one of
// the relays' flows, and which.
func (d *Dials) ReturningFlow(peer netip.AddrPort) (Dial, bool) {
	return d.get(pairOf(peer, netip.AddrPort{}))
}

func (d *Dials) put(k pair, dial Dial) {
	if d == nil || !k.local.IsValid() {
		return
	}
	s := &d.shard[d.shardOf(k)]
	s.mu.Lock()
	s.dials[k] = dial
	s.mu.Unlock()
}

func (d *Dials) del(k pair) {
	if d == nil || !k.local.IsValid() {
		return
	}
	s := &d.shard[d.shardOf(k)]
	s.mu.Lock()
	delete(s.dials, k)
	s.mu.Unlock()
}

func (d *Dials) get(k pair) (Dial, bool) {
	if d == nil {
		return Dial{}, false
	}
	s := &d.shard[d.shardOf(k)]
	s.mu.Lock()
	dial, ok := s.dials[k]
	s.mu.Unlock()
	return dial, ok
}

// FirstLoop says whether a loop found through relay from should be
// logged: the first one, and then one every relogAfter, so that a loop is
// logged once per service port rather than per connection.
func (d *Dials) FirstLoop(from string, now time.Time) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if at, seen := d.logged[from]; seen && now.Sub(at) < relogAfter {
		return false
	}
	d.logged[from] = now
	return true
}

// Len is how many outgoing connections are remembered.
func (d *Dials) Len() int {
	if d == nil {
		return 0
	}
	n := 0
	for i := range d.shard {
		d.shard[i].mu.Lock()
		n += len(d.shard[i].dials)
		d.shard[i].mu.Unlock()
	}
	return n
}
