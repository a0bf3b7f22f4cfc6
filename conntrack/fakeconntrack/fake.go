// Package fakeconntrack is an in-memory conntrack table for tests. It
// records every request it is asked to carry out, applies requests to the
// flows it holds with the real matching code (conntrack.Request.Matcher),
// and fails on demand the way a kernel pass can: after deleting some flows.
package fakeconntrack

import (
	"errors"
	"slices"
	"sync"

	"kproxy.dev/kproxy/conntrack"
)

// Table is the fake. The zero value is empty and ready.
type Table struct {
	mu       sync.Mutex
	flows    []conntrack.Flow
	requests []conntrack.Request
	fails    int
}

var _ conntrack.Table = (*Table)(nil)

// ErrInjected is the error of a pass FailNext made fail.
var ErrInjected = errors.New("fakeconntrack: injected failure")

// Add puts flows in the table.
func (t *Table) Add(flows ...conntrack.Flow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flows = append(t.flows, flows...)
}

// Flows returns the flows still in the table, in the order added.
func (t *Table) Flows() []conntrack.Flow {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.flows)
}

// FailNext makes the next n passes fail. A failing pass deletes nothing
// and reports ErrInjected.
func (t *Table) FailNext(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fails = n
}

// TakeRequests returns the requests received since the last call, failed
// ones included.
func (t *Table) TakeRequests() []conntrack.Request {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.requests
	t.requests = nil
	return r
}

// Delete implements conntrack.Table.
func (t *Table) Delete(req *conntrack.Request) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests = append(t.requests, *req)
	if t.fails > 0 {
		t.fails--
		return 0, ErrInjected
	}
	m := req.Matcher()
	kept := t.flows[:0]
	deleted := 0
	for _, f := range t.flows {
		if m.Match(f) {
			deleted++
			continue
		}
		kept = append(kept, f)
	}
	t.flows = kept
	return deleted, nil
}
