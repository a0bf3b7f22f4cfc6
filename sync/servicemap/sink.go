package servicemap

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Sink receives the objects a source (the cluster informers or the services
// file) observes. Update means add-or-replace. Implementations must not keep
// references to objects they are handed after mutating them; sources must not
// mutate objects after handing them over. Tracker is the one real Sink.
type Sink interface {
	OnServiceUpdate(svc *v1.Service)
	OnServiceDelete(key types.NamespacedName)
	OnEndpointSliceUpdate(slice *discovery.EndpointSlice)
	OnEndpointSliceDelete(key types.NamespacedName)
	// OnNodeUpdate and OnNodeDelete concern this node's Node object only.
	OnNodeUpdate(node *v1.Node)
	OnNodeDelete()
	// OnSynced says the source has delivered its complete initial state; no
	// sync may run before it.
	OnSynced()
}
