package userspace

import (
	"net/netip"

	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/redirect/replyroute"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// keptSources is what decides which of the relays' dials keep the client's
// address (lb/keepsource): this node's endpoints, counted per service port
// between syncs like the service addresses (addrs.go), so a sync of a few
// changed ports looks at theirs only.
type keptSources struct {
	keeper *keepsource.Keeper
	steer  *replyroute.Netlink
	// endpoints counts, per address, the service ports with an endpoint on
	// this node there; services the service ports with the address as a
	// cluster, external or LoadBalancer IP (never dialled transparently:
	// they may lead back into kproxy).
	endpoints, services addressCount
	from                *servicemap.Snapshot
}

func newKeptSources() *keptSources {
	steer := &replyroute.Netlink{}
	return &keptSources{keeper: keepsource.New(steer), steer: steer}
}

// localEndpointsOf lists the addresses of sp's endpoints on this node.
func localEndpointsOf(sp *servicemap.ServicePort) []netip.Addr {
	if sp == nil {
		return nil
	}
	var out []netip.Addr
	for _, ep := range sp.Endpoints {
		if ep.IsLocal {
			out = append(out, ep.Addr.Unmap())
		}
	}
	return out
}

// update recounts the changed service ports (every one when all) and gives
// the keeper a new view: the counted endpoints that are neither service
// nor node addresses, the node's addresses and its links' prefixes. With
// the prefixes unknown (nil), it keeps no address until the next sync: a
// client on an endpoint's own link would be answered past the node.
func (k *keptSources) update(snap *servicemap.Snapshot, changes *servicemap.ChangeSet, all bool,
	nodeAddrs []netip.Addr, prefixes []netip.Prefix) {
	fams := ipfamily.All()
	if all || k.from == nil {
		k.endpoints, k.services = addressCount{}, addressCount{}
		for name, sp := range snap.All() {
			for _, a := range localEndpointsOf(sp) {
				k.endpoints[a]++
			}
			for _, a := range addressesOf(name, sp, fams, true) {
				k.services[a]++
			}
		}
	} else {
		before := map[netip.Addr]int{}
		for _, name := range changes.Changed {
			was, _ := k.from.Get(name)
			is, _ := snap.Get(name)
			move(k.endpoints, before, localEndpointsOf(was), localEndpointsOf(is))
			move(k.services, before, addressesOf(name, was, fams, true), addressesOf(name, is, fams, true))
		}
	}
	k.from = snap
	if prefixes == nil {
		k.keeper.SetView(nil)
		return
	}
	v := &keepsource.View{Endpoints: map[netip.Addr]bool{}, NodeAddrs: map[netip.Addr]bool{}, OnLink: prefixes}
	for _, a := range nodeAddrs {
		v.NodeAddrs[a.Unmap()] = true
	}
	for a := range k.endpoints {
		if k.services[a] == 0 && !v.NodeAddrs[a] {
			v.Endpoints[a] = true
		}
	}
	k.keeper.SetView(v)
}
