package userspace

import (
	"maps"
	"net/netip"
	"slices"

	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// wanted is the relays the last syncs asked for, kept so that a sync of a
// few changed service ports among tens of thousands recomputes, starts and
// steers only theirs: the whole set is made again only when what every
// relay depends on moves (the node, its addresses) or the engine asks for a
// full sync.
type wanted struct {
	relays map[balancer.Key]relaySpec
	// What relays was made from besides the snapshot: the node's host IPs
	// (which families are served) and the NodePort addresses.
	hostIPs       []netip.Addr
	nodePortAddrs map[ipfamily.Family][]netip.Addr
	// failed are the keys whose relay could not start; every sync tries
	// them again.
	failed map[balancer.Key]bool
}

// updateWanted brings m.want in line with snap and returns the relay keys that may
// have changed since the last sync; all says every key may have (w was made
// again).
func (m *Mode) updateWanted(snap *servicemap.Snapshot, node portal.Node, nodePortAddrs map[ipfamily.Family][]netip.Addr,
	changes *servicemap.ChangeSet) (touched []balancer.Key, all bool) {
	w := &m.want
	if w.relays == nil || changes.Full || changes.Periodic || changes.NodeChanged ||
		!slices.Equal(w.hostIPs, node.HostIPs) || !maps.EqualFunc(w.nodePortAddrs, nodePortAddrs, slices.Equal) {
		*w = wanted{relays: m.wantedRelays(snap, node, nodePortAddrs), hostIPs: node.HostIPs,
			nodePortAddrs: nodePortAddrs, failed: map[balancer.Key]bool{}}
		return nil, true
	}
	for key := range w.failed {
		touched = append(touched, key)
	}
	for _, name := range changes.Changed {
		for _, key := range m.relayKeys(name) {
			delete(w.relays, key)
			touched = append(touched, key)
		}
		if sp, ok := snap.Get(name); ok {
			m.addWantedRelays(w.relays, name, sp, node, nodePortAddrs)
		}
	}
	return touched, false
}

// relayKeys lists the keys the relays of service port name can have.
func (m *Mode) relayKeys(name servicemap.ServicePortName) []balancer.Key {
	keys := make([]balancer.Key, 0, 2*len(m.families))
	for _, fam := range m.families {
		keys = append(keys, balancer.Key{Port: name, Class: balancer.Internal, Family: fam},
			balancer.Key{Port: name, Class: balancer.External, Family: fam})
	}
	return keys
}
