package main

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// syncOnce feeds objs to the proxier the way kube-proxy's informers do at
// start (topology from this node, every Service and EndpointSlice, then the
// two "synced" calls) and returns once that first sync has finished. The
// last "synced" call runs the sync itself, synchronously; the health
// server, to which a successful sync reports, tells whether it got through.
func syncOnce(ps *proxierSet, objs *objects, nodeName string) error {
	start := time.Now()
	if node := objs.node(nodeName); node != nil {
		ps.provider.OnTopologyChange(topologyLabels(node))
	}
	for _, svc := range objs.services {
		ps.provider.OnServiceAdd(svc)
	}
	for _, slice := range objs.slices {
		ps.provider.OnEndpointSliceAdd(slice)
	}
	ps.provider.OnServiceSynced()
	ps.provider.OnEndpointSlicesSynced()

	health := ps.health.Health()
	for _, fam := range ps.families {
		st, ok := health.Status[fam]
		if !ok || st.LastUpdated.Before(start) {
			return fmt.Errorf("the %s proxier's first sync did not finish (it reports success to the health server only at the end; see the log above)", fam)
		}
	}
	return nil
}

// topologyLabels are the node labels kube-proxy passes on (NodeTopologyConfig).
func topologyLabels(node *v1.Node) map[string]string {
	labels := map[string]string{}
	if zone, ok := node.Labels[v1.LabelTopologyZone]; ok {
		labels[v1.LabelTopologyZone] = zone
	}
	return labels
}
