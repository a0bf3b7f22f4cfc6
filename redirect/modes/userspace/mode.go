// Package userspace is --proxy-mode=userspace: portals steer Service traffic
// to relays in this process (lb/), which forward it to endpoints the balancer
// picks. A family's portals are of one of two kinds: REDIRECT portals are
// iptables rules (redirect/modes/userspace/portal) sending service traffic
// to proxy ports; local portals make the service addresses local to the
// node (redirect/localroute) and the relays listen on them, with no
// netfilter at all. It is the only package that joins redirect/ and lb/;
// lb never imports redirect.
package userspace

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/nodepods"
	"kproxy.dev/kproxy/lb/ports"
	"kproxy.dev/kproxy/lb/sctprelay"
	"kproxy.dev/kproxy/lb/selfdial"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/localroute"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/redirect/replyroute"
	"kproxy.dev/kproxy/redirect/sockdiag"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
	"kproxy.dev/kproxy/sync/sysctl"
)

// Config is what the userspace mode needs from the command line and the
// kernel probe.
type Config struct {
	Features kernel.Features
	NodeName string
	// NodePorts is --nodeport-addresses. Its BindAddress, when specific,
	// is also the node address locally generated service traffic is
	// DNATed to; otherwise the Node's, or the first global address of each
	// family.
	NodePorts      nodeaddr.Policy
	PortRange      ports.Range
	UDPIdleTimeout time.Duration
	Registerer     prometheus.Registerer
	// LocalAddresses lists the node's addresses; nil reads them from the
	// interfaces at each sync. Tests set it.
	LocalAddresses func() ([]netip.Addr, error)
	// LocalPrefixes lists the prefixes of the node's addresses (its
	// links' subnets); nil reads them at each sync. Tests set it.
	LocalPrefixes func() ([]netip.Prefix, error)
	// DirectRoutes lists what the node routes without a gateway, where
	// point-to-point pod networks put this node's pods; nil reads the
	// kernel's main table. Tests set it.
	DirectRoutes func() ([]netip.Prefix, error)
	// Applier returns the portal applier of a family; nil means the real
	// kernel through the detected iptables backend. Tests pass fakes.
	Applier func(ipfamily.Family) (Applier, error)
	// Opener claims NodePorts; nil means real sockets.
	Opener portal.Opener
	// Portals is the portal kind asked for ("" means auto).
	Portals contract.Portals
	// LocalhostNodePorts: local portals open NodePorts on IPv4 loopback
	// too, as kube-proxy's iptables mode answers them there.
	LocalhostNodePorts bool
	// Routes are the local portals' routes; nil means the real kernel's.
	Routes localroute.Routes
	// Sysctls are where local portals keep the node from answering ARP for
	// service addresses, and where the unprivileged port start is read;
	// nil leaves ARP alone (tests).
	Sysctls sysctl.Sysctls
	// Holders names the sockets holding a service address local portals
	// cannot bind; nil means the kernel's sock_diag. Tests pass fakes.
	Holders sockdiag.Finder
	// Detector is --detect-local-mode, and ClusterCIDRs --cluster-cidr: the
	// pods whose external traffic a Local policy short-circuits to every
	// endpoint, as kube-proxy does (LocalPods).
	Detector     contract.LocalDetector
	ClusterCIDRs []netip.Prefix
	// ServiceMetrics exports each service port's relay counters
	// (--userspace-service-metrics): about five series per port.
	ServiceMetrics bool
}

// Applier writes one family's portal rules.
type Applier interface {
	Apply(ctx context.Context, rs *portal.Ruleset, full bool) error
	// Intact says what of the last Apply is no longer in the kernel ("":
	// nothing).
	Intact(ctx context.Context) (string, error)
}

// Mode is the userspace proxy mode.
type Mode struct {
	cfg      Config
	logger   klog.Logger
	metrics  *lbmetrics.Metrics
	balancer *balancer.Balancer
	// fromNode are the node's addresses (as host prefixes) and its pods'
	// prefixes: the clients a Local policy short-circuits (localClients).
	fromNode []netip.Prefix
	alloc    *ports.Allocator
	claimer  *portal.Claimer
	unserved *sctprelay.UnservedReporter
	// descriptors bounds the sockets UDP flows hold, for all relays.
	descriptors *fdbudget.Budget
	// portLimits bound each service port's TCP connections and SCTP
	// associations (relay.limit).
	portLimits fdbudget.PortLimits
	// dials are every relay's outgoing connections (TCP, SCTP) and flows
	// (UDP), so one that comes back into kproxy is refused as a loop.
	dials    *selfdial.Dials
	families []ipfamily.Family
	// kinds is the portal kind of each family in families.
	kinds map[ipfamily.Family]contract.Portals
	// portalKinds is kproxy_userspace_portals.
	portalKinds *prometheus.GaugeVec
	// socketChecked: the REDIRECT family's rules let redirected traffic
	// only into relay sockets (markRelaySocket), its iptables can check it.
	socketChecked map[ipfamily.Family]bool
	// applied: the family's portal rules were written at least once.
	applied map[ipfamily.Family]bool
	// portalRepairs is kproxy_userspace_portal_repairs_total.
	portalRepairs prometheus.Counter
	appliers      map[ipfamily.Family]Applier
	// conflicts are the service addresses other sockets hold.
	conflicts *portalConflicts
	// routes are the local routes of the local-portal and socket-lookup
	// families' service addresses.
	routes *localroute.Table

	// ctx scopes the relays' Serve loops; cancel stops them all.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// relays is owned by Sync, which the engine never runs concurrently.
	relays map[balancer.Key]*relay
	// served is what /services and the per-service metrics read of them.
	served *servedPorts
	// want is what relays should be, as of the last sync.
	want wanted
	// localRelays counts the relays with sockets of their own on service
	// addresses (r.local), which every sync looks at.
	localRelays int
	// addrs are the service addresses of the last sync.
	addrs serviceAddrs
	// steering serves the socket-lookup families; nil without any.
	steering *steering
	// kept decides which dials keep the client's address, and steers
	// their replies.
	kept *keptSources
	// oneDump: the node's addresses and prefixes both come from the
	// kernel, so a sync reads them in one dump (nodeAddresses).
	oneDump bool
}

// New checks the kernel can run the mode and prepares it; nothing is
// programmed until the first Sync.
func New(ctx context.Context, cfg Config) (*Mode, error) {
	logger := klog.FromContext(ctx).WithValues("mode", mode.Userspace)
	m := &Mode{cfg: cfg, logger: logger, relays: map[balancer.Key]*relay{}, served: newServedPorts(), appliers: map[ipfamily.Family]Applier{},
		kinds: map[ipfamily.Family]contract.Portals{}, applied: map[ipfamily.Family]bool{},
		socketChecked: map[ipfamily.Family]bool{}}
	var err error
	if m.metrics, err = lbmetrics.New(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("userspace mode metrics: %w", err)
	}
	if cfg.ServiceMetrics && cfg.Registerer != nil {
		if err := cfg.Registerer.Register(lbmetrics.NewServiceCollector(m.served.each)); err != nil {
			return nil, fmt.Errorf("userspace mode per-service metrics: %w", err)
		}
	}
	if m.balancer, err = balancer.New(balancer.Config{NodeName: cfg.NodeName, Registerer: cfg.Registerer}); err != nil {
		return nil, fmt.Errorf("userspace mode balancer: %w", err)
	}
	m.alloc = ports.NewAllocator(cfg.PortRange)
	if m.descriptors, err = fdbudget.FromRLimit(); err != nil {
		return nil, fmt.Errorf("userspace mode: %w", err)
	}
	total, perClient := m.descriptors.Limits()
	logger.V(2).Info("UDP flows' descriptor budget", "total", total, "perClientAddress", perClient)
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		return nil, fmt.Errorf("userspace mode: reading RLIMIT_NOFILE: %w", err)
	}
	m.portLimits = fdbudget.PortLimitsFor(nofile.Cur)
	logger.V(2).Info("Each service port's TCP connections or SCTP associations", "most", m.portLimits.Connections, "mostDialing", m.portLimits.Dialing)
	m.dials = selfdial.New()
	// Rules a predecessor left served flows that died with it.
	if err := replyroute.Clean(); err != nil {
		logger.Error(err, "Could not remove the reply rules a previous run left")
	}
	opener := cfg.Opener
	if opener == nil {
		opener = portal.SocketOpener{}
	}
	m.claimer = portal.NewClaimer(opener)
	m.unserved = sctprelay.NewUnservedReporter(m.metrics.SCTPUnservedServicePorts)
	m.unserved.Logger = logger
	m.oneDump = m.cfg.LocalAddresses == nil && m.cfg.LocalPrefixes == nil
	if m.cfg.LocalAddresses == nil {
		m.cfg.LocalAddresses = kernel.InterfaceAddresses
	}
	if m.cfg.LocalPrefixes == nil {
		m.cfg.LocalPrefixes = kernel.InterfacePrefixes
	}
	if m.cfg.DirectRoutes == nil {
		m.cfg.DirectRoutes = kernel.DirectRoutes
	}

	if m.cfg.Routes == nil {
		m.cfg.Routes = &localroute.Netlink{}
	}
	m.routes = localroute.NewTable(m.cfg.Routes)
	for _, fam := range ipfamily.All() {
		kind, reason := portalsFor(cfg.Portals, cfg.Features.Chosen(fam), cfg.Features.SKLookup)
		if kind == "" {
			logger.Info("Not proxying this IP family", "family", fam, "reason", reason)
			continue
		}
		logger.Info("Userspace portals", "family", fam, "portals", kind, "reason", reason)
		if kind == contract.PortalsRedirect {
			var a Applier
			if cfg.Applier != nil {
				a, err = cfg.Applier(fam)
			} else {
				a, err = portal.NewApplier(portal.Config{Family: fam, Backend: cfg.Features.Backend})
			}
			if err != nil {
				return nil, fmt.Errorf("userspace mode, %s portals: %w", fam, err)
			}
			m.appliers[fam] = a
			m.socketChecked[fam] = canCheckSocket(ctx, logger, fam, a)
		}
		m.families = append(m.families, fam)
		m.kinds[fam] = kind
	}
	m.kept = newKeptSources(ctx, logger, m.kinds)
	if len(m.families) == 0 {
		return nil, errors.New("userspace mode: no IP family has iptables with REDIRECT and DNAT, which --userspace-portals=redirect needs (local portals need no netfilter)")
	}
	if err := m.registerPortalKinds(cfg.Registerer); err != nil {
		return nil, err
	}
	if m.conflicts, err = newPortalConflicts(logger, cfg.Holders, cfg.Registerer); err != nil {
		return nil, err
	}
	m.conflicts.warnExposure(m.familiesOf(contract.PortalsLocal))
	for fam := range m.appliers {
		if !m.socketChecked[fam] {
			warnUnprivilegedProxyPorts(logger, cfg.Sysctls, cfg.PortRange, "the rules cannot check the receiving socket")
			break
		}
	}
	if len(m.appliers) > 0 && cfg.Features.SCTP.Present {
		warnUnprivilegedProxyPorts(logger, cfg.Sysctls, cfg.PortRange, "the rules cannot check an SCTP packet's receiving socket")
	}
	if routesServiceAddresses(m.kinds[ipfamily.IPv4]) && cfg.Sysctls != nil {
		strictARP(logger, cfg.Sysctls)
	}
	if !cfg.Features.SCTP.Present {
		logger.Info("SCTP sockets are absent from this kernel: SCTP service ports will not be served; TCP and UDP are",
			"detail", cfg.Features.SCTP.Detail)
	}
	// A predecessor that crashed left portals pointing at ports (or
	// service addresses) nobody holds now: take them away before waiting
	// for the first sync, which puts back the ones still wanted.
	if err := m.withdrawPortals(false); err != nil {
		logger.Error(err, "Could not withdraw the portals a previous run left; the first sync rewrites them")
	}
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if fams := m.steeredFamilies(); len(fams) > 0 {
		if err := m.startSteering(fams); err != nil {
			m.cancel()
			m.wg.Wait()
			return nil, fmt.Errorf("userspace mode: %w", err)
		}
	}
	go m.balancer.RunSweeper(m.ctx, time.Minute)
	return m, nil
}

func (m *Mode) Name() mode.Name { return mode.Userspace }

// Sync brings relays, portal rules and NodePort claims in line with snap.
// Problems confined to one service port (a NodePort someone else holds, no
// proxy port left) are logged and leave the other ports working; only a
// failure to write the rules fails the sync.
func (m *Mode) Sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	m.balancer.Update(snap)
	local, prefixes, err := m.nodeAddresses()
	if err != nil {
		return fmt.Errorf("listing the node's addresses: %w", err)
	}
	node := m.node(snap, local)
	pods := m.nodePods(snap.Node, prefixes)
	node.LocalPods = pods.Known
	m.balancer.SetLocalClients(localClients(local, pods))
	m.fromNode = fromNode(local, node.LocalPods)
	nodePortAddrs := m.localNodePortAddrs(snap, local)
	m.updateKeptSources(ctx, snap, changes, local, prefixes, pods)

	// Sockets and steering before routes, and routes away before steering:
	// a service address is local only while what serves it is in place, so
	// no other socket on the node can take its traffic meanwhile.
	touched, all, portErrs := m.syncRelays(snap, node, nodePortAddrs, changes)
	m.conflicts.settle()
	m.updateAddrs(snap, node, changes, all)
	var routesErr error
	steerErr := m.syncSteering(touched, all, func() { routesErr = m.syncRoutes(node, changes.Full || changes.Periodic) })
	claims, applied, buildErrs, applyErr := m.syncPortals(ctx, snap, node, changes.Full, changes.Periodic)
	portErrs = append(portErrs, buildErrs...)
	portErrs = append(portErrs, m.armGuardedRelays(applied)...)
	m.reportUnservedSCTP(snap)
	if err := m.claimer.Sync(claims); err != nil {
		portErrs = append(portErrs, err)
	}
	if len(portErrs) > 0 {
		m.logger.Error(errors.Join(portErrs...), "Some service ports are not fully served")
	}
	return errors.Join(routesErr, steerErr, applyErr)
}

// syncRelays starts the relays snap needs, updates the running ones, stops
// the ones no longer needed, and moves UDP flows off departed endpoints. It
// returns the relay keys that may have changed (all: every one).
func (m *Mode) syncRelays(snap *servicemap.Snapshot, node portal.Node, nodePortAddrs map[ipfamily.Family][]netip.Addr,
	changes *servicemap.ChangeSet) (touched []balancer.Key, all bool, errs []error) {
	touched, all = m.updateWanted(snap, node, nodePortAddrs, changes)
	want := m.want.relays
	ensure := func(key balancer.Key, spec relaySpec) {
		if r, ok := m.relays[key]; ok {
			r.update(spec, m.balancer.Picker(key))
			return
		}
		r, err := m.startRelay(key, spec)
		if err != nil {
			m.served.remove(key)
			m.want.failed[key] = true
			errs = append(errs, err)
			return
		}
		delete(m.want.failed, key)
		m.relays[key] = r
		m.served.add(r)
		if r.local {
			m.localRelays++
		}
	}
	remove := func(key balancer.Key, r *relay) {
		if r.steered {
			m.steering.forget(r)
		}
		if r.local {
			m.localRelays--
		}
		r.close(m.alloc)
		delete(m.relays, key)
		m.served.remove(key)
	}
	if all {
		for key, spec := range want {
			ensure(key, spec)
		}
	} else {
		for _, key := range touched {
			if spec, ok := want[key]; ok {
				ensure(key, spec)
			} else {
				delete(m.want.failed, key)
			}
		}
	}
	if !all && m.localRelays == 0 {
		// Only the touched keys can have lost their relay.
		for _, key := range touched {
			if r, ok := m.relays[key]; ok && !hasKey(want, key) {
				remove(key, r)
			}
		}
		m.moveStaleFlows(changes)
		return touched, all, errs
	}
	for key, r := range m.relays {
		if !hasKey(want, key) {
			remove(key, r)
			continue
		}
		// A local relay retries the listeners it could not open.
		if r.local {
			sp := r.spec.Load().port
			errs = append(errs, m.syncListeners(r, portal.EndpointStateOf(sp, key.Family, r.hasEndpoints(sp)))...)
		}
	}
	m.moveStaleFlows(changes)
	return touched, all, errs
}

// moveStaleFlows makes UDP flows pinned to an endpoint that went away pick
// again, as conntrack entries would be flushed in the kernel modes.
func (m *Mode) moveStaleFlows(changes *servicemap.ChangeSet) {
	for _, stale := range changes.StaleEndpoints {
		for _, key := range m.relayKeys(stale.ServicePort) {
			if r, ok := m.relays[key]; ok {
				r.closeFlowsTo(stale.Endpoint.AddrPort(), m.steering)
			}
		}
	}
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// armGuardedRelays lets the UDP relays of the families whose portal rules
// (and so their guards) are now in the kernel receive datagrams.
func (m *Mode) armGuardedRelays(applied []ipfamily.Family) []error {
	var errs []error
	for key, r := range m.relays {
		if !slices.Contains(applied, key.Family) {
			continue
		}
		for _, s := range r.servers {
			if !s.awaitingGuard {
				continue
			}
			if err := setDropAll(s.raw, false); err != nil {
				errs = append(errs, fmt.Errorf("%s: serving the proxy socket once its guard rule is in: %w", key, err))
				continue
			}
			s.awaitingGuard = false
		}
	}
	return errs
}

// syncPortals writes each family's portal rules and returns the NodePort
// claims they need, the families written, the per-port problems, and a
// failure to write.
//
// A periodic sync first checks each family's rules are still as written,
// and rewrites them all if not: a firewall reload (iptables -F, -X) must
// not leave services unreachable, and the guards unhooked, until the
// hourly full sync.
func (m *Mode) syncPortals(ctx context.Context, snap *servicemap.Snapshot, node portal.Node, full, periodic bool) ([]portal.Claim, []ipfamily.Family, []error, error) {
	var claims []portal.Claim
	var applied []ipfamily.Family
	var portErrs, applyErrs []error
	for _, fam := range m.families {
		if _, ok := hostIPOf(node.HostIPs, fam); !ok || m.kinds[fam] != contract.PortalsRedirect {
			// No address to DNAT local traffic to: the node does not use
			// this family, so nothing of it is programmed. Local portals
			// have no rules.
			continue
		}
		portals := portal.PortalsFrom(snap, func(name servicemap.ServicePortName) (portal.ProxyPorts, bool) {
			return m.proxyPorts(name, fam)
		})
		for i := range portals {
			portals[i].Endpoints = m.endpointStates(portals[i].Port, fam)
		}
		famNode := node
		famNode.CheckSocket = m.socketChecked[fam]
		rs, err := portal.Build(fam, famNode, portals)
		if err != nil {
			portErrs = append(portErrs, err)
		}
		famFull := full
		if periodic && !full {
			problem, err := m.appliers[fam].Intact(ctx)
			if err != nil {
				applyErrs = append(applyErrs, fmt.Errorf("%s portals: %w", fam, err))
			}
			if problem != "" || err != nil {
				m.logger.Info("Portal rules changed behind kproxy's back; rewriting them all", "family", fam, "problem", problem)
				m.portalRepairs.Inc()
				famFull = true
			}
		}
		if err := m.appliers[fam].Apply(ctx, rs, famFull); err != nil {
			applyErrs = append(applyErrs, fmt.Errorf("%s portals: %w", fam, err))
		} else {
			applied = append(applied, fam)
			m.applied[fam] = true
		}
		claims = append(claims, rs.Claims...)
	}
	return claims, applied, portErrs, errors.Join(applyErrs...)
}

// reportUnservedSCTP counts and logs (once each) the SCTP service ports a
// kernel without SCTP sockets cannot serve.
func (m *Mode) reportUnservedSCTP(snap *servicemap.Snapshot) {
	if m.cfg.Features.SCTP.Present {
		return
	}
	var unserved []servicemap.ServicePortName
	for name := range snap.All() {
		if name.Protocol == v1.ProtocolSCTP {
			unserved = append(unserved, name)
		}
	}
	m.unserved.Update(unserved)
}

// Close stops the relays and takes the portals with them: rules and local
// routes pointing at ports no relay holds would hand service traffic to
// whoever binds those ports next, any local user included. The chains and
// jump rules stay, empty, for the next start to fill; --cleanup or another
// mode removes them.
func (m *Mode) Close() error {
	m.cancel()
	for key, r := range m.relays {
		r.close(m.alloc)
		delete(m.relays, key)
		m.served.remove(key)
	}
	var steerErr error
	if m.steering != nil {
		steerErr = m.steering.closeRelays()
	}
	m.wg.Wait()
	err := errors.Join(m.withdrawPortals(true), m.claimer.Close())
	if m.steering != nil {
		// Detached only once the routes are gone: a service address left
		// local without the program would take any socket bound to its
		// ports, whoever opened it.
		steerErr = errors.Join(steerErr, m.steering.detach())
	}
	return errors.Join(err, steerErr, m.kept.close(context.Background()))
}

// updateKeptSources brings the keeper's view to snap; full and periodic
// syncs also put back the reply table's route and the socket-match tables
// if someone took them. prefixes nil (unknown) keeps no address.
func (m *Mode) updateKeptSources(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet,
	local []netip.Addr, prefixes []netip.Prefix, pods *nodepods.Set) {
	m.kept.update(snap, changes, changes.Full || changes.Periodic || changes.NodeChanged, local, prefixes, pods)
	if !changes.Full && !changes.Periodic {
		return
	}
	if err := m.kept.repair(ctx); err != nil {
		m.logger.Error(err, "Cannot put back what steers the replies to dials from clients' addresses")
	}
}

// nodeAddresses reads the node's addresses and their prefixes, in one dump
// of the interfaces when both come from the kernel. The prefixes are nil
// when they cannot be read (logged): no dial keeps the client's address
// then, as a client on an endpoint's own link cannot be told.
func (m *Mode) nodeAddresses() ([]netip.Addr, []netip.Prefix, error) {
	if m.oneDump {
		prefixes, err := kernel.InterfacePrefixes()
		if err != nil {
			return nil, nil, err
		}
		local := make([]netip.Addr, 0, len(prefixes))
		for _, p := range prefixes {
			local = append(local, p.Addr())
		}
		if prefixes == nil {
			prefixes = []netip.Prefix{} // known: none
		}
		return local, prefixes, nil
	}
	local, err := m.cfg.LocalAddresses()
	if err != nil {
		return nil, nil, err
	}
	prefixes, err := m.cfg.LocalPrefixes()
	if err != nil {
		m.logger.Error(err, "Cannot read the node's link prefixes; relays dial every endpoint from the node's address until the next sync")
		return local, nil, nil
	}
	if prefixes == nil {
		prefixes = []netip.Prefix{}
	}
	return local, prefixes, nil
}

// withdrawTimeout bounds how long Close may spend taking the portals away.
const withdrawTimeout = 10 * time.Second

// withdrawPortals empties the portal chains of every family that has them
// (onlyWritten: that this run wrote) and removes the local portals' routes.
func (m *Mode) withdrawPortals(onlyWritten bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
	defer cancel()
	var errs []error
	for _, fam := range m.families {
		if m.kinds[fam] != contract.PortalsRedirect || (onlyWritten && !m.applied[fam]) {
			continue
		}
		rs, err := portal.Build(fam, portal.Node{}, nil)
		if err == nil {
			err = m.appliers[fam].Apply(ctx, rs, false)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("withdrawing the %s portals: %w", fam, err))
		}
	}
	if slices.ContainsFunc(m.families, func(f ipfamily.Family) bool { return routesServiceAddresses(m.kinds[f]) }) {
		local, err := m.cfg.LocalAddresses()
		if err == nil {
			err = m.routes.Sync(nil, local, true)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("withdrawing the local portals' routes: %w", err))
		}
	}
	return errors.Join(errs...)
}

// proxyPorts is the portal lookup: the listener ports of a service port's
// relays in one family, if it has any.
func (m *Mode) proxyPorts(name servicemap.ServicePortName, fam ipfamily.Family) (portal.ProxyPorts, bool) {
	var pp portal.ProxyPorts
	if r, ok := m.relays[balancer.Key{Port: name, Class: balancer.Internal, Family: fam}]; ok {
		pp.Internal = r.port
	}
	if r, ok := m.relays[balancer.Key{Port: name, Class: balancer.External, Family: fam}]; ok {
		pp.External = r.port
	}
	return pp, pp.Internal != 0 || pp.External != 0
}

// endpointStates asks the balancer (through the relays' pickers, updated at
// the start of Sync) whether each traffic class of sp has an endpoint in
// fam, so the portals refuse clients of classes without one at once.
func (m *Mode) endpointStates(sp *servicemap.ServicePort, fam ipfamily.Family) portal.ClassEndpoints {
	var e portal.ClassEndpoints
	if r, ok := m.relays[balancer.Key{Port: sp.Name, Class: balancer.Internal, Family: fam}]; ok {
		e.Internal = portal.EndpointStateOf(sp, fam, r.hasEndpoints(sp))
	}
	if r, ok := m.relays[balancer.Key{Port: sp.Name, Class: balancer.External, Family: fam}]; ok {
		e.External = portal.EndpointStateOf(sp, fam, r.hasEndpoints(sp))
	}
	return e
}

// node gathers what the portal rules need to know about this node.
func (m *Mode) node(snap *servicemap.Snapshot, local []netip.Addr) portal.Node {
	n := portal.Node{LocalAddresses: local, HostIPs: hostIPs(m.cfg.NodePorts.BindAddress, snap.Node, local)}
	for _, fam := range ipfamily.All() {
		n.NodePortAddresses = append(n.NodePortAddresses, m.cfg.NodePorts.For(fam, snap.Node)...)
	}
	return n
}

// localPods are the sources kube-proxy's local-traffic detector takes for
// this node's pods: --cluster-cidr, or the Node's pod CIDRs under NodeCIDR
// (none before the Node is known). The interface detectors match where a
// packet came in, which a relay does not see: none.
func (m *Mode) localPods(node *servicemap.NodeInfo) []netip.Prefix {
	switch d := m.cfg.Detector; {
	case d.NodeCIDR:
		if node == nil {
			return nil
		}
		return node.PodCIDRs
	case d.ByCIDR():
		return m.cfg.ClusterCIDRs
	}
	return nil
}

// nodePods narrows the detector's pod prefixes to this node's pods: the
// parts on one of the node's links (a pod bridge) or routed without a
// gateway (a veth per pod), and, for pods that start before the next sync,
// a lookup in the routes then. Only their traffic comes back through this
// node, so only they can be short-circuited; kube-proxy's rule matches
// another node's pods too, but the endpoint's replies bypass the node that
// DNATed them and the connection fails (an upstream spec expects that).
func (m *Mode) nodePods(node *servicemap.NodeInfo, links []netip.Prefix) *nodepods.Set {
	detector := m.localPods(node)
	if len(detector) == 0 {
		return &nodepods.Set{}
	}
	routes, err := m.cfg.DirectRoutes()
	if err != nil {
		m.logger.Error(err, "Cannot read the node's routes; only pods on its links count as this node's until the next sync")
	}
	return &nodepods.Set{Known: narrowPods(detector, append(slices.Clip(links), routes...)), Detector: detector,
		Direct: func(a netip.Addr) bool {
			routes, err := m.cfg.DirectRoutes()
			return err == nil && slices.ContainsFunc(routes, func(p netip.Prefix) bool { return p.Contains(a) })
		}}
}

// narrowPods keeps the parts of the pod prefixes that lie in one of
// places (links, routes).
func narrowPods(pods, places []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range pods {
		for _, l := range places {
			switch {
			case !p.Overlaps(l):
			case p.Bits() >= l.Bits():
				out = append(out, p.Masked())
			default:
				out = append(out, l.Masked())
			}
		}
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out)
}

// fromNode is localClients as prefixes, for the local portals' socket
// filters, in a stable order (a changed list re-attaches them).
func fromNode(local []netip.Addr, pods []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(local)+len(pods))
	for _, a := range local {
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	out = append(out, pods...)
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out)
}

// localClients are the clients whose external traffic starts on this node:
// its own addresses and its pods.
func localClients(local []netip.Addr, pods *nodepods.Set) *balancer.LocalClients {
	l := &balancer.LocalClients{Addrs: make(map[netip.Addr]bool, len(local)), Pods: pods}
	for _, a := range local {
		l.Addrs[a.Unmap()] = true
	}
	return l
}

// hostIPs picks, per family, the address locally generated service traffic
// is DNATed to: --bind-address when specific, else the Node's own address
// when it is local, else the first global unicast address.
func hostIPs(bind netip.Addr, node *servicemap.NodeInfo, local []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, is4 := range []bool{true, false} {
		pick := func(candidates []netip.Addr) (netip.Addr, bool) {
			for _, a := range candidates {
				if a.Is4() == is4 && a.IsGlobalUnicast() && slices.Contains(local, a) {
					return a, true
				}
			}
			return netip.Addr{}, false
		}
		var nodeAddrs []netip.Addr
		if node != nil {
			nodeAddrs = node.Addresses
		}
		for _, candidates := range [][]netip.Addr{{bind}, nodeAddrs, local} {
			if a, ok := pick(candidates); ok {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

func hostIPOf(ips []netip.Addr, fam ipfamily.Family) (netip.Addr, bool) {
	for _, ip := range ips {
		if ipfamily.Of(ip) == fam {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// socketMatcher is an Applier that can say whether its iptables can check
// the receiving socket.
type socketMatcher interface {
	SupportsSocketMatch(ctx context.Context) error
}

// canCheckSocket says whether fam's rules can let redirected traffic only
// into kproxy's relay sockets. Where they cannot (no xt_socket), a proxy
// port freed by a crash can be taken over until the next start, and the log
// says so.
func canCheckSocket(ctx context.Context, logger klog.Logger, fam ipfamily.Family, a Applier) bool {
	sm, ok := a.(socketMatcher)
	if !ok {
		return false
	}
	err := sm.SupportsSocketMatch(ctx)
	if err == nil {
		err = canMarkSockets(fam)
	}
	if err != nil {
		logger.Info("Redirected traffic is not checked for the receiving socket: a proxy port freed by a crash could be taken over until the next start",
			"family", fam, "reason", err)
		return false
	}
	return true
}
