package userspace

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
	"kproxy.dev/kproxy/sync/sysctl"
)

// portalsFor picks one family's portal kind from the one asked for, what
// its iptables can do and whether the kernel runs socket-lookup programs,
// and says why; "" means the family is not proxied. Left to choose, it
// prefers REDIRECT portals (kube-proxy's own userspace design), then
// socket-lookup portals, then local portals, which expose what the other
// two do not (localExposure).
func portalsFor(asked contract.Portals, ipt kernel.IPTables, skLookup kernel.Support) (contract.Portals, string) {
	natWorks := ipt.Usable && ipt.Redirect && ipt.DNAT
	switch asked {
	case contract.PortalsLocal:
		return contract.PortalsLocal, "--userspace-portals=local"
	case contract.PortalsSKLookup:
		if !skLookup.Present {
			return "", "--userspace-portals=sklookup, and the kernel cannot run a socket-lookup program: " + skLookup.String()
		}
		return contract.PortalsSKLookup, "--userspace-portals=sklookup"
	case contract.PortalsRedirect:
		if !natWorks {
			return "", "--userspace-portals=redirect, and iptables cannot REDIRECT and DNAT: " + ipt.String()
		}
		return contract.PortalsRedirect, "--userspace-portals=redirect"
	}
	if natWorks {
		return contract.PortalsRedirect, "the nat table can REDIRECT and DNAT"
	}
	if skLookup.Present {
		return contract.PortalsSKLookup, "the nat table cannot REDIRECT and DNAT (" + ipt.String() + "); the kernel runs socket-lookup programs"
	}
	return contract.PortalsLocal, "the nat table cannot REDIRECT and DNAT (" + ipt.String() + ") and the kernel cannot run socket-lookup programs (" + skLookup.String() + ")"
}

// routesServiceAddresses says whether a portal kind makes service addresses
// local with routes.
func routesServiceAddresses(kind contract.Portals) bool {
	return kind == contract.PortalsLocal || kind == contract.PortalsSKLookup
}

// registerPortalKinds exports which portal kind each family runs, as
// kproxy_userspace_portals{family,portals} 1, and counts portal repairs.
func (m *Mode) registerPortalKinds(reg prometheus.Registerer) error {
	m.portalKinds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "kproxy", Subsystem: "userspace", Name: "portals",
		Help: "The portal kind (redirect, local or sklookup) the userspace mode runs in each IP family: 1 for the kind in use.",
	}, []string{"family", "portals"})
	for fam, kind := range m.kinds {
		m.portalKinds.WithLabelValues(string(fam), string(kind)).Set(1)
	}
	m.portalRepairs = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "kproxy", Subsystem: "userspace", Name: "portal_repairs_total",
		Help: "Periodic checks that found the portal rules no longer as written (a firewall reload) and rewrote them.",
	})
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{m.portalKinds, m.portalRepairs} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering the userspace portals metrics: %w", err)
		}
	}
	return nil
}

// strictARP keeps the node from answering ARP for addresses that are local
// only through local routes (service addresses): arp_ignore=1 answers only
// for addresses configured on the receiving interface, arp_announce=2 picks
// such an address as the source of the node's own requests. These are
// kube-proxy's strict-ARP values. IPv6 needs nothing: neighbour discovery
// answers only for interface addresses.
func strictARP(logger klog.Logger, s sysctl.Sysctls) {
	for _, setting := range []struct {
		name string
		want int
	}{{"net/ipv4/conf/all/arp_ignore", 1}, {"net/ipv4/conf/all/arp_announce", 2}} {
		old, err := s.Read(setting.name)
		if err == nil {
			if v, perr := strconv.Atoi(old); perr == nil && v >= setting.want {
				continue
			}
			err = s.Write(setting.name, strconv.Itoa(setting.want))
		}
		if err != nil {
			logger.Error(err, "Could not keep the node from answering ARP for service addresses: hosts on its links may send service traffic here")
			continue
		}
		logger.Info("Set sysctl so the node does not answer ARP for service addresses", "sysctl", setting.name, "value", setting.want, "previous", old)
	}
}

// syncRoutes makes the addresses of the local-portal and socket-lookup
// families' services local: cluster IPs, externalIPs and LoadBalancer IPs
// (serviceAddrs.routed). A family the node has no address of gets none, as
// it gets no relays. verify (full and periodic syncs) reads the kernel's
// routes first, so one deleted behind kproxy's back comes back; other syncs
// write what came and went.
func (m *Mode) syncRoutes(node portal.Node, verify bool) error {
	a := &m.addrs
	if len(a.routedFams) == 0 {
		return nil
	}
	if !verify && !a.rebuilt {
		if done, err := m.routes.Update(a.routedCame, a.routedWent, node.LocalAddresses); done {
			if err != nil {
				return fmt.Errorf("local portals: %w", err)
			}
			return nil
		}
	}
	if err := m.routes.Sync(a.routed.list(), node.LocalAddresses, verify); err != nil {
		return fmt.Errorf("local portals: %w", err)
	}
	return nil
}

// familiesWith lists the families the node has an address of whose portal
// kind satisfies is.
func (m *Mode) familiesWith(node portal.Node, is func(contract.Portals) bool) []ipfamily.Family {
	var out []ipfamily.Family
	for _, fam := range m.families {
		if _, used := hostIPOf(node.HostIPs, fam); used && is(m.kinds[fam]) {
			out = append(out, fam)
		}
	}
	return out
}

// localNodePortAddrs returns, per local-portal family, the node addresses
// NodePorts listen on: those --nodeport-addresses selects, IPv4 loopback
// only as --iptables-localhost-nodeports allows, never IPv6 link-local
// addresses (a socket needs their zone) or IPv6 loopback (kube-proxy does
// not serve NodePorts there).
func (m *Mode) localNodePortAddrs(snap *servicemap.Snapshot, local []netip.Addr) map[ipfamily.Family][]netip.Addr {
	out := map[ipfamily.Family][]netip.Addr{}
	for fam, kind := range m.kinds {
		if !routesServiceAddresses(kind) {
			continue
		}
		cidrs := m.cfg.NodePorts.For(fam, snap.Node)
		for _, a := range nodeaddr.Select(cidrs, local, fam) {
			switch {
			case a.IsLinkLocalUnicast(), a.Is6() && a.IsLoopback():
				continue
			case a.Is4() && a.IsLoopback() && !(m.cfg.LocalhostNodePorts && nodeaddr.AdmitsIPv4Loopback(cidrs)):
				continue
			}
			out[fam] = append(out[fam], a)
		}
	}
	return out
}
