package balancer

import (
	"net/netip"
	"sync"
)

// affinityEntry pins one client to one endpoint. Entries form a list in
// least-recently-used order; since every entry of a table shares one timeout,
// that is also expiry order, so expiring and evicting both work from the head.
type affinityEntry struct {
	client   netip.Addr
	endpoint netip.AddrPort
	lastUse  int64 // clock nanos
	prev     *affinityEntry
	next     *affinityEntry
}

// affinityTable is one picker's ClientIP affinity state, bounded to max
// entries (the least recently used is dropped to make room).
type affinityTable struct {
	mu       sync.Mutex
	byClient map[netip.Addr]*affinityEntry
	head     *affinityEntry // least recently used
	tail     *affinityEntry // most recently used
	max      int
}

// pinnedLocked returns the index in index of client's pinned endpoint and
// refreshes the pin, or drops the pin when it expired (timeout nanos after its
// last use) or its endpoint is no longer eligible.
func (t *affinityTable) pinnedLocked(client netip.Addr, now, timeout int64, index map[netip.AddrPort]int) (int, bool, int) {
	e := t.byClient[client]
	if e == nil {
		return 0, false, 0
	}
	i, ok := index[e.endpoint]
	if !ok || now-e.lastUse >= timeout {
		t.removeLocked(e)
		return 0, false, 1
	}
	e.lastUse = now
	t.moveToTailLocked(e)
	return i, true, 0
}

// pinLocked pins client to endpoint, or refreshes and repoints an existing
// pin. It reports how many entries it added (0 or 1) and evicted.
func (t *affinityTable) pinLocked(client netip.Addr, endpoint netip.AddrPort, now int64) (added, evicted int) {
	if e := t.byClient[client]; e != nil {
		e.endpoint = endpoint
		e.lastUse = now
		t.moveToTailLocked(e)
		return 0, 0
	}
	if t.max <= 0 {
		return 0, 0
	}
	for len(t.byClient) >= t.max && t.head != nil {
		t.removeLocked(t.head)
		evicted++
	}
	if t.byClient == nil {
		t.byClient = map[netip.Addr]*affinityEntry{}
	}
	e := &affinityEntry{client: client, endpoint: endpoint, lastUse: now}
	t.byClient[client] = e
	t.appendLocked(e)
	return 1, evicted
}

// unpinLocked drops client's pin if it points at endpoint, and says whether it did.
func (t *affinityTable) unpinLocked(client netip.Addr, endpoint netip.AddrPort) bool {
	e := t.byClient[client]
	if e == nil || e.endpoint != endpoint {
		return false
	}
	t.removeLocked(e)
	return true
}

// expireLocked drops every pin unused for timeout nanos and returns how many.
func (t *affinityTable) expireLocked(now, timeout int64) int {
	n := 0
	for t.head != nil && now-t.head.lastUse >= timeout {
		t.removeLocked(t.head)
		n++
	}
	return n
}

// retainLocked drops pins whose endpoint is not in index and returns how many.
func (t *affinityTable) retainLocked(index map[netip.AddrPort]int) int {
	n := 0
	for e := t.head; e != nil; {
		next := e.next
		if _, ok := index[e.endpoint]; !ok {
			t.removeLocked(e)
			n++
		}
		e = next
	}
	return n
}

// clearLocked drops every pin and returns how many there were.
func (t *affinityTable) clearLocked() int {
	n := len(t.byClient)
	t.byClient = nil
	t.head, t.tail = nil, nil
	return n
}

func (t *affinityTable) appendLocked(e *affinityEntry) {
	e.prev, e.next = t.tail, nil
	if t.tail != nil {
		t.tail.next = e
	} else {
		t.head = e
	}
	t.tail = e
}

func (t *affinityTable) unlinkLocked(e *affinityEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (t *affinityTable) moveToTailLocked(e *affinityEntry) {
	if t.tail == e {
		return
	}
	t.unlinkLocked(e)
	t.appendLocked(e)
}

func (t *affinityTable) removeLocked(e *affinityEntry) {
	t.unlinkLocked(e)
	delete(t.byClient, e.client)
}
