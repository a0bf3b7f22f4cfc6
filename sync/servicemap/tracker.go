package servicemap

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Tracker is the Sink that keeps the current Services, EndpointSlices and Node
// and turns them into snapshots. It is safe for concurrent use: sources call
// the On* methods from their goroutines, the sync loop calls Snapshot.
type Tracker struct {
	nodeName string
	onChange func()
}

// NewTracker returns a Tracker for the node named nodeName. onChange, if not
// nil, is called (without locks held) after every event that may change the
// next snapshot, and after OnSynced.
func NewTracker(nodeName string, onChange func()) *Tracker {
	return &Tracker{nodeName: nodeName, onChange: onChange}
}

var _ Sink = (*Tracker)(nil)

func (t *Tracker) OnServiceUpdate(svc *v1.Service)                      { panic("TODO") }
func (t *Tracker) OnServiceDelete(key types.NamespacedName)             { panic("TODO") }
func (t *Tracker) OnEndpointSliceUpdate(slice *discovery.EndpointSlice) { panic("TODO") }
func (t *Tracker) OnEndpointSliceDelete(key types.NamespacedName)       { panic("TODO") }
func (t *Tracker) OnNodeUpdate(node *v1.Node)                           { panic("TODO") }
func (t *Tracker) OnNodeDelete()                                        { panic("TODO") }
func (t *Tracker) OnSynced()                                            { panic("TODO") }

// Synced says every source has delivered its initial state.
func (t *Tracker) Synced() bool { panic("TODO") }

// Snapshot returns a new snapshot and what changed since the previous call
// (Full on the first call). It is cheap when little changed.
func (t *Tracker) Snapshot() (*Snapshot, *ChangeSet) { panic("TODO") }

// Pending reports how many service and endpoint events arrived since the
// last Snapshot, for the *_changes_pending gauges.
func (t *Tracker) Pending() (services, endpoints int) { panic("TODO") }
