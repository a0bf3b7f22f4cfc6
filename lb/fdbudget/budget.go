// Package fdbudget shares the process's descriptor limit between the UDP
// relays' per-flow sockets and everything else kproxy needs descriptors for
// (TCP relays, listeners, the API connection, health and metrics servers,
// file reads, rule writes).
//
// Why a budget: every UDP flow holds a connected socket, and a flow starts
// on any datagram from a new client address and port. Without a bound, one
// client cycling through source ports can hold every descriptor the process
// may open until its flows expire, and then TCP accepts, health checks and
// syncs fail with EMFILE. The budget gives UDP flows at most a share of
// RLIMIT_NOFILE, and one client address at most a share of that. Port
// (port.go) likewise gives one service port's TCP connections at most a
// share of the limit.
package fdbudget

import (
	"fmt"
	"net/netip"
	"sync"
	"syscall"
)

const (
	// FlowShareDivisor: UDP flows may hold 1/FlowShareDivisor of the
	// descriptor limit; the rest stays for everything else.
	FlowShareDivisor = 2
	// ClientShareDivisor: one client address may hold 1/ClientShareDivisor
	// of the flows' share, so a single host cannot starve the others.
	ClientShareDivisor = 4
	// minPerClient keeps small limits usable for a busy legitimate client.
	minPerClient = 16
)

// Verdict is Acquire's answer.
type Verdict int

const (
	// Granted: the caller may open one descriptor and must Release it.
	Granted Verdict = iota
	// ClientFull: this client address holds its whole share.
	ClientFull
	// Full: all flows together hold the whole share.
	Full
)

func (v Verdict) String() string {
	switch v {
	case Granted:
		return "granted"
	case ClientFull:
		return "client's share of descriptors in use"
	case Full:
		return "flows' share of descriptors in use"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Budget counts descriptors held per client address against a total and a
// per-client bound. It is safe for concurrent use; a nil *Budget grants
// everything (relays built without one, as in unit tests).
type Budget struct {
	mu        sync.Mutex
	total     int
	perClient int
	held      int
	byClient  map[netip.Addr]int
}

// New returns a budget of total descriptors, perClient of them at most for
// one client address. Both must be positive.
func New(total, perClient int) (*Budget, error) {
	if total <= 0 || perClient <= 0 {
		return nil, fmt.Errorf("descriptor budget: total %d and per-client %d must be positive", total, perClient)
	}
	return &Budget{total: total, perClient: min(perClient, total), byClient: make(map[netip.Addr]int)}, nil
}

// ForLimit returns the budget of a process whose soft RLIMIT_NOFILE is
// limit: the flows' share, and each client's share of that.
func ForLimit(limit uint64) (*Budget, error) {
	total := int(min(limit, 1<<30)) / FlowShareDivisor
	return New(total, max(minPerClient, total/ClientShareDivisor))
}

// FromRLimit is ForLimit of the process's current soft RLIMIT_NOFILE; read
// it after raising the limit.
func FromRLimit() (*Budget, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil, fmt.Errorf("descriptor budget: reading RLIMIT_NOFILE: %w", err)
	}
	return ForLimit(lim.Cur)
}

// Acquire asks for one descriptor on behalf of client.
func (b *Budget) Acquire(client netip.Addr) Verdict {
	if b == nil {
		return Granted
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.byClient[client] >= b.perClient:
		return ClientFull
	case b.held >= b.total:
		return Full
	}
	b.held++
	b.byClient[client]++
	return Granted
}

// Release gives back a descriptor Acquire granted for client.
func (b *Budget) Release(client netip.Addr) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.byClient[client]
	if !ok {
		return // not ours: never let the counts go negative
	}
	if n <= 1 {
		delete(b.byClient, client)
	} else {
		b.byClient[client] = n - 1
	}
	b.held--
}

// Limits returns the total and per-client bounds.
func (b *Budget) Limits() (total, perClient int) {
	if b == nil {
		return 0, 0
	}
	return b.total, b.perClient
}

// Held returns how many descriptors are held, in all and by client.
func (b *Budget) Held(client netip.Addr) (all, byClient int) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held, b.byClient[client]
}
