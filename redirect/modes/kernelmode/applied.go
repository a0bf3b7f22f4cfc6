package kernelmode

import (
	"sync"

	"kproxy.dev/kproxy/sync/servicemap"
)

// Applied is what a family last programmed per service port. The sync
// alone writes it, under the lock, and reads it without (Last); /services
// reads it one port at a time under the read lock (Get). The zero value
// is empty.
type Applied[P any] struct {
	mu sync.RWMutex
	m  map[servicemap.ServicePortName]*P
}

// Get returns what was last programmed for name (nil: nothing), for
// readers other than the sync.
func (a *Applied[P]) Get(name servicemap.ServicePortName) *P {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.m[name]
}

// Last is the sync's own view, read without the lock; callers must not
// modify it.
func (a *Applied[P]) Last() map[servicemap.ServicePortName]*P { return a.m }

// Replace records a full sync: the ports of want, nil ones left out.
func (a *Applied[P]) Replace(want map[servicemap.ServicePortName]*P) {
	m := make(map[servicemap.ServicePortName]*P, len(want))
	for name, p := range want {
		if p != nil {
			m[name] = p
		}
	}
	a.mu.Lock()
	a.m = m
	a.mu.Unlock()
}

// Update records a partial sync: want's ports replace the ones recorded,
// a nil one removes its port.
func (a *Applied[P]) Update(want map[servicemap.ServicePortName]*P) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[servicemap.ServicePortName]*P, len(want))
	}
	for name, p := range want {
		if p == nil {
			delete(a.m, name)
		} else {
			a.m[name] = p
		}
	}
}
