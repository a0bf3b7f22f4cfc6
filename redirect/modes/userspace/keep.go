package userspace

import (
	"context"
	"errors"
	"net/netip"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/lb/nodepods"
	"kproxy.dev/kproxy/redirect/modes/contract"
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
	// rules are the per-flow reply rules (families without netfilter, or
	// whose nftables cannot match sockets); matched the families whose
	// replies an nftables socket match marks (REDIRECT portals).
	rules   *replyroute.Netlink
	matched map[ipfamily.Family]*replyroute.SocketMatch
	// endpoints counts, per address, the service ports with an endpoint on
	// this node there; services the service ports with the address as a
	// cluster, external or LoadBalancer IP (never dialled transparently:
	// they may lead back into kproxy).
	endpoints, services addressCount
	from                *servicemap.Snapshot
	// serviceSet is services as the views hold it: never changed once
	// made, made again only when an address came or went (at tens of
	// thousands of services a copy per sync would be most of a sync).
	// Nil while no view needs it (no pods known).
	serviceSet map[netip.Addr]bool
}

// newKeptSources steers the replies of the REDIRECT-portal families with
// the socket match, which costs nothing per flow, where nftables can; the
// others (local and socket-lookup portals, which use no netfilter) with
// per-flow rules.
func newKeptSources(ctx context.Context, logger klog.Logger, kinds map[ipfamily.Family]contract.Portals) *keptSources {
	k := &keptSources{rules: &replyroute.Netlink{}, matched: map[ipfamily.Family]*replyroute.SocketMatch{}}
	by := map[ipfamily.Family]keepsource.Steering{}
	for _, fam := range ipfamily.All() {
		by[fam] = k.rules
		if kinds[fam] != contract.PortalsRedirect {
			continue
		}
		sm, err := replyroute.NewSocketMatch(ctx, fam)
		if err != nil {
			logger.Info("Replies to dials from clients' addresses are steered by one policy rule per flow", "family", fam, "reason", err)
			continue
		}
		k.matched[fam], by[fam] = sm, sm
	}
	k.keeper = keepsource.New(replyroute.ByFamily{IPv4: by[ipfamily.IPv4], IPv6: by[ipfamily.IPv6]})
	return k
}

// repair puts back the reply table's routes and the socket-match tables.
func (k *keptSources) repair(ctx context.Context) error {
	errs := []error{k.rules.Repair()}
	for _, sm := range k.matched {
		errs = append(errs, sm.Repair(ctx))
	}
	return errors.Join(errs...)
}

// close removes everything the replies were steered with.
func (k *keptSources) close(ctx context.Context) error {
	k.rules.Close()
	var errs []error
	if len(k.matched) > 0 {
		errs = append(errs, replyroute.CleanNFTables(ctx))
	}
	return errors.Join(append(errs, replyroute.Clean())...)
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
// nor node addresses, the node's addresses, its links' prefixes, the pods'
// prefixes (by the local-traffic detector) and the service addresses. With
// the prefixes unknown (nil), it keeps no address until the next sync: a
// client on an endpoint's own link would be answered past the node.
func (k *keptSources) update(snap *servicemap.Snapshot, changes *servicemap.ChangeSet, all bool,
	nodeAddrs []netip.Addr, prefixes []netip.Prefix, pods *nodepods.Set) {
	fams := ipfamily.All()
	servicesChanged := true
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
		before, servicesBefore := map[netip.Addr]int{}, map[netip.Addr]int{}
		for _, name := range changes.Changed {
			was, _ := k.from.Get(name)
			is, _ := snap.Get(name)
			move(k.endpoints, before, localEndpointsOf(was), localEndpointsOf(is))
			move(k.services, servicesBefore, addressesOf(name, was, fams, true), addressesOf(name, is, fams, true))
		}
		came, went := cameAndWent(k.services, servicesBefore)
		servicesChanged = len(came)+len(went) > 0
	}
	k.from = snap
	switch {
	case pods == nil || len(pods.Detector) == 0:
		// Only dials to endpoints elsewhere, which need pods, look them up.
		k.serviceSet = nil
	case servicesChanged || k.serviceSet == nil:
		k.serviceSet = make(map[netip.Addr]bool, len(k.services))
		for a := range k.services {
			k.serviceSet[a] = true
		}
	}
	if prefixes == nil {
		k.keeper.SetView(nil)
		return
	}
	v := &keepsource.View{Endpoints: map[netip.Addr]bool{}, NodeAddrs: map[netip.Addr]bool{}, OnLink: prefixes, Pods: pods}
	v.Services = k.serviceSet
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
