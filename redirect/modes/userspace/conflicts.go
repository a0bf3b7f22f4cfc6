package userspace

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/sockdiag"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
)

// portalConflicts tracks the service addresses local portals cannot bind
// because another socket on the node holds them. Whoever holds one
// receives the service's traffic there, so each is logged (once while it
// lasts, naming the holder), counted in kproxy_userspace_portal_conflicts,
// and reported on /healthz (PortalConflicts). Each sync retries the
// binds; a conflict the sync did not meet again is over.
type portalConflicts struct {
	finder sockdiag.Finder
	logger klog.Logger
	gauge  *prometheus.GaugeVec

	// found are the conflicts met since the last settle; logged the ones
	// standing at the last settle, as the log named them. Only Sync
	// touches them.
	found  map[portalAddress]conflict
	logged map[portalAddress]conflict

	mu        sync.Mutex
	published []string
}

// portalAddress is one service address and port of one protocol.
type portalAddress struct {
	protocol v1.Protocol
	ap       netip.AddrPort
}

func (a portalAddress) String() string { return string(a.protocol) + " " + a.ap.String() }

// conflict is who holds a portal address, and whose address it is.
type conflict struct {
	servicePort string
	holders     string
}

// conflictsShown bounds the conflicts PortalConflicts lists by name; the
// metric counts them all.
const conflictsShown = 5

func newPortalConflicts(logger klog.Logger, finder sockdiag.Finder, reg prometheus.Registerer) (*portalConflicts, error) {
	if finder == nil {
		finder = sockdiag.Kernel{}
	}
	c := &portalConflicts{finder: finder, logger: logger, found: map[portalAddress]conflict{}, logged: map[portalAddress]conflict{}}
	c.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "kproxy", Subsystem: "userspace", Name: "portal_conflicts",
		Help: "Service addresses and ports, per protocol, that local portals could not bind at the last sync because another socket on the node holds them (and receives their traffic).",
	}, []string{"protocol"})
	for _, p := range []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP} {
		c.gauge.WithLabelValues(string(p)).Set(0)
	}
	if reg != nil {
		if err := reg.Register(c.gauge); err != nil {
			return nil, fmt.Errorf("registering kproxy_userspace_portal_conflicts: %w", err)
		}
	}
	return c, nil
}

// warnExposure says at start, for the families whose local portals are
// ordinary sockets on the service addresses, what that exposes, and
// whether conflicts can name their holders.
func (c *portalConflicts) warnExposure(families []ipfamily.Family) {
	if len(families) == 0 {
		return
	}
	holders := "each conflict names the socket holding the address (sock_diag)"
	if _, err := c.finder.Holders(sockdiag.TCP, netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
		holders = "conflicts are counted, but their holders cannot be named: " + err.Error()
	}
	c.logger.Info("Warning: local portals serve each service port from an ordinary socket bound to the service address. "+
		"Any local user can bind a service address and port before kproxy does (or between a service's removal and its re-add) and receive its traffic; "+
		"programs listening on the node's wildcard address answer on service addresses too. "+
		"A service address kproxy cannot bind is logged, counted in kproxy_userspace_portal_conflicts and reported on /healthz",
		"families", families, "holders", holders)
}

// note is the error path of binding a local portal's socket for r on ap.
// When another socket holds ap (EADDRINUSE) it asks sock_diag which one,
// records the conflict and returns nil: settle reports it. Any other error
// is returned as is.
func (c *portalConflicts) note(r *relay, ap netip.AddrPort, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	addr := portalAddress{protocol: r.spec.Load().protocol, ap: ap}
	c.found[addr] = conflict{servicePort: r.key.Port.String(), holders: c.describeHolders(addr)}
	return nil
}

// describeHolders names the sockets holding addr.
func (c *portalConflicts) describeHolders(addr portalAddress) string {
	var proto sockdiag.Protocol
	switch addr.protocol {
	case v1.ProtocolTCP:
		proto = sockdiag.TCP
	case v1.ProtocolUDP:
		proto = sockdiag.UDP
	default:
		return "held by a socket sock_diag does not list"
	}
	holders, err := c.finder.Holders(proto, addr.ap)
	if err != nil {
		return "held by a socket that could not be named: " + err.Error()
	}
	if len(holders) == 0 {
		return "held by a socket sock_diag no longer lists (it may have just closed, or be a connection bound without SO_REUSEADDR)"
	}
	var parts []string
	for _, h := range holders {
		parts = append(parts, fmt.Sprintf("uid %d (socket inode %d bound to %s)", h.UID, h.Inode, h.Local))
	}
	return "held by " + strings.Join(parts, " and ")
}

// settle ends a sync: it logs the conflicts that began or changed holder
// and those that ended, sets the gauge and publishes the list for
// /healthz.
func (c *portalConflicts) settle() {
	counts := map[v1.Protocol]int{}
	for addr, found := range c.found {
		counts[addr.protocol]++
		if c.logged[addr] == found {
			continue
		}
		c.logged[addr] = found
		c.logger.Error(nil, "Another socket on the node holds a service address: its traffic there is NOT served by kproxy but received by that socket's owner",
			"protocol", addr.protocol, "address", addr.ap, "servicePort", found.servicePort, "holders", found.holders)
	}
	for addr := range c.logged {
		if _, ok := c.found[addr]; !ok {
			delete(c.logged, addr)
			c.logger.Info("A service address another socket held is free again: kproxy serves it, or no longer needs it",
				"protocol", addr.protocol, "address", addr.ap)
		}
	}
	for _, p := range []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP} {
		c.gauge.WithLabelValues(string(p)).Set(float64(counts[p]))
	}
	var list []string
	for _, addr := range slices.SortedFunc(maps.Keys(c.found), comparePortalAddresses) {
		list = append(list, addr.String()+" of "+c.found[addr].servicePort+" "+c.found[addr].holders)
	}
	c.mu.Lock()
	c.published = list
	c.mu.Unlock()
	clear(c.found)
}

func comparePortalAddresses(a, b portalAddress) int {
	if n := strings.Compare(string(a.protocol), string(b.protocol)); n != 0 {
		return n
	}
	return a.ap.Compare(b.ap)
}

// PortalConflicts lists the service addresses another socket held at the
// last sync, as "TCP 198.18.0.10:80 of ns/web:http/TCP held by uid 65534
// (...)": the first
// few by name, then how many more (mode.ConflictReporter).
func (m *Mode) PortalConflicts() (count int, shown []string) {
	c := m.conflicts
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.published), slices.Clone(c.published[:min(len(c.published), conflictsShown)])
}

// familiesOf lists the families whose portals are of kind.
func (m *Mode) familiesOf(kind contract.Portals) []ipfamily.Family {
	var out []ipfamily.Family
	for _, fam := range m.families {
		if m.kinds[fam] == kind {
			out = append(out, fam)
		}
	}
	return out
}

var _ mode.ConflictReporter = (*Mode)(nil)
