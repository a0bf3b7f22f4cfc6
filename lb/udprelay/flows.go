package udprelay

import (
	"net/netip"

	"kproxy.dev/kproxy/lb"
	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/rawudp"
)

// flow is one client's association with one endpoint: the client's address
// on the proxy socket and a socket connected to the endpoint, whose replies
// go back to the client.
type flow struct {
	client     netip.AddrPort
	clientName eventloop.Sockaddr // the client's sockaddr as received, to address replies
	endpoint   netip.AddrPort
	picker     lb.Picker      // the picker that chose endpoint, told of failures
	fd         int            // connected upstream socket
	local      netip.AddrPort // the upstream socket's address, while in the relays' dials
	// kept: the upstream socket is bound to the client's address, and
	// this is the steering of its replies, released when it closes.
	kept       keepsource.Flow
	lastActive int64 // relay clock (ns) of the last datagram either way
	// metrics and flowMetrics are what the flow counts into: its route's
	// (Route.Metrics), else the relay's own.
	metrics     *lbmetrics.Protocol
	flowMetrics *lbmetrics.Metrics

	// On a shared socket: the service address the client wrote to, its
	// route's name and the path of replies from it; reply is nil on a
	// per-socket relay.
	service netip.AddrPort
	route   string
	reply   *rawudp.Path

	// prev and next order flows by lastActive, least recent first.
	prev, next *flow
	// sibling orders the flows of the same client address the same way,
	// so a client at its share of descriptors can give up its own least
	// recently active flow without a walk over everyone's.
	sibling siblings
}

// siblings links a flow into its client address's ring, circular, from
// the address's least recently active flow (ring.oldest) round to its most
// recently active one (ring.oldest.sibling.prev).
type siblings struct {
	prev, next *flow
	ring       *addressRing
}

// addressRing is where a client address's ring starts; a flow reaches it
// without a map lookup, as touch must for every datagram.
type addressRing struct{ oldest *flow }

// sharedFlow is a shared socket's flow with its reply path, allocated as one.
type sharedFlow struct {
	flow
	path rawudp.Path
}

// serviceKey identifies a shared socket's flow: one client to one service
// address.
type serviceKey struct{ client, service netip.AddrPort }

// flowTable indexes flows by client (by client and service address on a
// shared socket) and by upstream socket and keeps them in
// least-recently-active order, so idle expiry and eviction look only at the
// head: O(1) per flow, no timer per flow or per packet. Only the relay's
// event loop touches it, so it needs no lock.
type flowTable struct {
	byClient  map[netip.AddrPort]*flow
	byService map[serviceKey]*flow // a shared socket's flows
	byFD      map[int32]*flow
	// byAddress holds each client address's ring of flows.
	byAddress map[netip.Addr]*addressRing
	head      flow // sentinel: head.next is the least recently active flow
}

func newFlowTable() *flowTable {
	t := &flowTable{byClient: make(map[netip.AddrPort]*flow), byService: make(map[serviceKey]*flow),
		byFD: make(map[int32]*flow), byAddress: make(map[netip.Addr]*addressRing)}
	t.head.next, t.head.prev = &t.head, &t.head
	return t
}

func (t *flowTable) len() int { return len(t.byFD) }

func (t *flowTable) add(f *flow) {
	if f.reply != nil {
		t.byService[serviceKey{f.client, f.service}] = f
	} else {
		t.byClient[f.client] = f
	}
	t.byFD[int32(f.fd)] = f
	t.pushBack(f)
	t.joinAddress(f)
}

func (t *flowTable) remove(f *flow) {
	if f.reply != nil {
		delete(t.byService, serviceKey{f.client, f.service})
	} else {
		delete(t.byClient, f.client)
	}
	delete(t.byFD, int32(f.fd))
	f.prev.next, f.next.prev = f.next, f.prev
	f.prev, f.next = nil, nil
	t.leaveAddress(f)
}

// touch marks f active at now, moving it to the back of both orders.
func (t *flowTable) touch(f *flow, now int64) {
	f.lastActive = now
	if t.head.prev == f {
		// The newest of all flows is the newest of its address's too.
		return
	}
	f.prev.next, f.next.prev = f.next, f.prev
	t.pushBack(f)
	t.lastOfAddress(f)
}

// joinAddress puts f last in its client address's ring.
func (t *flowTable) joinAddress(f *flow) {
	addr := f.client.Addr().Unmap()
	ring := t.byAddress[addr]
	if ring == nil {
		ring = &addressRing{oldest: f}
		t.byAddress[addr] = ring
		f.sibling = siblings{prev: f, next: f, ring: ring}
		return
	}
	ring.append(f)
}

// lastOfAddress moves f, in its ring already, to the ring's newest place.
func (t *flowTable) lastOfAddress(f *flow) {
	ring := f.sibling.ring
	switch {
	case ring.oldest.sibling.prev == f:
	case ring.oldest == f:
		// The ring is circular: f follows its newest member already.
		ring.oldest = f.sibling.next
	default:
		f.unlinkSibling()
		ring.append(f)
	}
}

// leaveAddress takes f out of its client address's ring.
func (t *flowTable) leaveAddress(f *flow) {
	ring := f.sibling.ring
	if f.sibling.next == f {
		delete(t.byAddress, f.client.Addr().Unmap())
	} else {
		if ring.oldest == f {
			ring.oldest = f.sibling.next
		}
		f.unlinkSibling()
	}
	f.sibling = siblings{}
}

// append links f into the ring as its newest member.
func (ring *addressRing) append(f *flow) {
	newest := ring.oldest.sibling.prev
	f.sibling = siblings{prev: newest, next: ring.oldest, ring: ring}
	newest.sibling.next, ring.oldest.sibling.prev = f, f
}

// unlinkSibling joins f's neighbours in its ring to each other; the ring's
// start is the caller's to move.
func (f *flow) unlinkSibling() {
	f.sibling.prev.sibling.next, f.sibling.next.sibling.prev = f.sibling.next, f.sibling.prev
}

// oldestOf returns addr's least recently active flow, or nil.
func (t *flowTable) oldestOf(addr netip.Addr) *flow {
	if ring := t.byAddress[addr]; ring != nil {
		return ring.oldest
	}
	return nil
}

func (t *flowTable) pushBack(f *flow) {
	f.prev, f.next = t.head.prev, &t.head
	t.head.prev.next = f
	t.head.prev = f
}

// oldest returns the least recently active flow, or nil.
func (t *flowTable) oldest() *flow {
	if t.head.next == &t.head {
		return nil
	}
	return t.head.next
}
