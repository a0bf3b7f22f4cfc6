package userspace

import (
	"maps"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// addressCount counts, per service address, the service ports that have it
// (a cluster IP serves each of its service's ports).
type addressCount map[netip.Addr]int

// list returns the counted addresses, in no order.
func (c addressCount) list() []netip.Addr { return slices.Collect(maps.Keys(c)) }

// serviceAddrs are the service addresses routes and steering serve, kept
// between syncs and updated for the changed service ports: at tens of
// thousands of services listing them all was most of a sync.
type serviceAddrs struct {
	// routed: of the local-portal and socket-lookup families (SCTP ports'
	// only where the kernel serves SCTP); steered: of the socket-lookup
	// families, SCTP ports' too, which the program guards.
	routed, steered         addressCount
	routedFams, steeredFams []ipfamily.Family
	routedSCTP              bool
	// from is the snapshot they were counted from.
	from *servicemap.Snapshot
	// rebuilt: the last update counted every service port afresh, so what
	// came and went is unknown and routes and guards are synced in full.
	rebuilt bool
	// What the last update (not rebuilt) added and removed.
	routedCame, routedWent, steeredCame, steeredWent []netip.Addr
}

// updateAddrs brings m.addrs to snap: only the changed service ports are
// looked at, unless all (the node or everything may have changed).
func (m *Mode) updateAddrs(snap *servicemap.Snapshot, node portal.Node, changes *servicemap.ChangeSet, all bool) {
	a := &m.addrs
	if all || a.from == nil {
		*a = serviceAddrs{
			routedFams:  m.familiesWith(node, routesServiceAddresses),
			steeredFams: m.familiesWith(node, func(kind contract.Portals) bool { return kind == contract.PortalsSKLookup }),
			routedSCTP:  m.cfg.Features.SCTP.Present,
			routed:      addressCount{}, steered: addressCount{},
			from: snap, rebuilt: true,
		}
		for name, sp := range snap.All() {
			for _, addr := range addressesOf(name, sp, a.routedFams, a.routedSCTP) {
				a.routed[addr]++
			}
			for _, addr := range addressesOf(name, sp, a.steeredFams, true) {
				a.steered[addr]++
			}
		}
		return
	}
	routedBefore, steeredBefore := map[netip.Addr]int{}, map[netip.Addr]int{}
	for _, name := range changes.Changed {
		was, _ := a.from.Get(name)
		is, _ := snap.Get(name)
		move(a.routed, routedBefore, addressesOf(name, was, a.routedFams, a.routedSCTP), addressesOf(name, is, a.routedFams, a.routedSCTP))
		move(a.steered, steeredBefore, addressesOf(name, was, a.steeredFams, true), addressesOf(name, is, a.steeredFams, true))
	}
	a.routedCame, a.routedWent = cameAndWent(a.routed, routedBefore)
	a.steeredCame, a.steeredWent = cameAndWent(a.steered, steeredBefore)
	a.from, a.rebuilt = snap, false
}

// move takes a service port's old addresses out of count and puts its new
// ones in, noting in before each address's count before its first change.
func move(count addressCount, before map[netip.Addr]int, old, new []netip.Addr) {
	for _, addr := range old {
		if _, ok := before[addr]; !ok {
			before[addr] = count[addr]
		}
		if count[addr]--; count[addr] <= 0 {
			delete(count, addr)
		}
	}
	for _, addr := range new {
		if _, ok := before[addr]; !ok {
			before[addr] = count[addr]
		}
		count[addr]++
	}
}

// cameAndWent lists the addresses count gained and lost since before.
func cameAndWent(count addressCount, before map[netip.Addr]int) (came, went []netip.Addr) {
	for addr, n := range before {
		switch {
		case n == 0 && count[addr] > 0:
			came = append(came, addr)
		case n > 0 && count[addr] == 0:
			went = append(went, addr)
		}
	}
	return came, went
}

// addressesOf lists the cluster, external and LoadBalancer IPs of service
// port sp (nil: none) in fams; withSCTP: of an SCTP port too.
func addressesOf(name servicemap.ServicePortName, sp *servicemap.ServicePort, fams []ipfamily.Family, withSCTP bool) []netip.Addr {
	if sp == nil || (name.Protocol == v1.ProtocolSCTP && !withSCTP) {
		return nil
	}
	var out []netip.Addr
	for _, fam := range fams {
		for _, addrs := range [][]netip.Addr{sp.ClusterIPs, sp.ExternalIPs, sp.LoadBalancerIPs} {
			out = append(out, ipfamily.Addrs(addrs, fam)...)
		}
	}
	return out
}
