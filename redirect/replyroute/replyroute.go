// Package replyroute makes the replies to the relays' transparent dials
// (lb/keepsource) local on the node, without netfilter: one policy rule per
// flow, matching exactly that flow's replies (protocol, endpoint address and
// port, client address and kproxy's port), sends them to a table whose only
// route is `local default dev lo`, so the kernel delivers them to the
// relay's socket instead of forwarding them towards the client.
//
// Why one exact rule per flow rather than a port range or the socket match:
// a rule narrower than the flow's four addresses would also take the
// replies of connections kproxy did not make (a client talking to a pod
// directly from a port in the range), and the socket match needs netfilter,
// which local and socket-lookup portals do without. The price is a netlink
// request when a flow opens and one when it closes, and one rule per open
// transparent flow for the kernel to walk on routed packets
// (bench/MEASUREMENTS.md has the figures).
//
// The rules and routes carry kproxy's protocol number (107, as
// redirect/localroute's), which is how Clean finds them.
package replyroute

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/redirect/localroute"
	"kproxy.dev/kproxy/sync/ipfamily"
)

const (
	// Table is the routing table the rules send replies to; it holds one
	// route per family, `local default dev lo`.
	Table = 107
	// Priority is the rules' preference: after the local table's rule (0),
	// before main's (32766).
	Priority = 107
	// Protocol marks kproxy's rules and routes.
	Protocol = localroute.Protocol

	loopbackIndex = 1 // LOOPBACK_IFINDEX: lo in every network namespace
)

// Netlink is a keepsource.Steering on the real kernel, in the network
// namespace it is first used in. Safe for concurrent use: the relays'
// event loops share one.
type Netlink struct {
	mu     sync.Mutex
	handle *netlink.Handle
	// tables: the family's table route is known to be in place.
	tables map[int]bool
}

var _ keepsource.Steering = (*Netlink)(nil)

// handleLocked opens the netlink socket on first use; n.mu is held.
func (n *Netlink) handleLocked() (*netlink.Handle, error) {
	if n.handle == nil {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("opening a route netlink socket: %w", err)
		}
		n.handle = h
		n.tables = map[int]bool{}
	}
	return n.handle, nil
}

// Add puts in the rule for f's replies, and the table's route of its
// family if it is not known to be there.
func (n *Netlink) Add(f keepsource.Flow) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, err := n.handleLocked()
	if err != nil {
		return err
	}
	fam := ipfamily.Of(f.Local.Addr()).Domain()
	if !n.tables[fam] {
		if err := ensureTable(h, fam); err != nil {
			return err
		}
		n.tables[fam] = true
	}
	if err := h.RuleAdd(rule(f)); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("adding the reply rule of %v → %v: %w", f.Local, f.Endpoint, err)
	}
	return nil
}

// Remove takes f's rule away; a rule already gone is no error.
func (n *Netlink) Remove(f keepsource.Flow) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, err := n.handleLocked()
	if err != nil {
		return err
	}
	if err := h.RuleDel(rule(f)); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("removing the reply rule of %v → %v: %w", f.Local, f.Endpoint, err)
	}
	return nil
}

// Repair puts back the table routes of the families used so far, in case
// someone deleted them (the rules would then send replies nowhere useful):
// one route lookup per family, for every sync.
func (n *Netlink) Repair() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handle == nil {
		return nil
	}
	var errs []error
	for fam := range n.tables {
		errs = append(errs, ensureTable(n.handle, fam))
	}
	return errors.Join(errs...)
}

// Close releases the netlink socket.
func (n *Netlink) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handle != nil {
		n.handle.Close()
		n.handle = nil
	}
}

// Clean removes every rule and table route of kproxy's protocol, in both
// families: at start-up (the flows they served died with the process that
// made them), at the mode's end, and in --cleanup.
func Clean() error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening a route netlink socket: %w", err)
	}
	defer h.Close()
	var errs []error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := h.RuleListFiltered(fam, &netlink.Rule{Protocol: Protocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing policy rules: %w", err))
			continue
		}
		for i := range rules {
			if rules[i].Protocol != Protocol {
				continue
			}
			rules[i].Family = fam
			if err := h.RuleDel(&rules[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing policy rule %v: %w", rules[i], err))
			}
		}
		if err := h.RouteDel(tableRoute(fam)); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("removing the route of table %d: %w", Table, err))
		}
	}
	return errors.Join(errs...)
}

// ensureTable adds fam's `local default dev lo` route to Table unless it is
// there.
func ensureTable(h *netlink.Handle, fam int) error {
	if err := h.RouteAdd(tableRoute(fam)); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("adding the route of table %d: %w", Table, err)
	}
	return nil
}

func tableRoute(fam int) *netlink.Route {
	bits := 32
	if fam == netlink.FAMILY_V6 {
		bits = 128
	}
	return &netlink.Route{
		LinkIndex: loopbackIndex,
		Dst:       &net.IPNet{IP: make(net.IP, bits/8), Mask: net.CIDRMask(0, bits)},
		Table:     Table,
		Type:      unix.RTN_LOCAL,
		Scope:     netlink.SCOPE_HOST,
		Protocol:  Protocol,
		Family:    fam,
	}
}

// rule matches exactly the replies of f: from its endpoint's address and
// port, to its local address and port, of its protocol.
func rule(f keepsource.Flow) *netlink.Rule {
	host := func(a netip.Addr) *net.IPNet {
		a = a.Unmap()
		return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
	}
	r := netlink.NewRule()
	r.Family = ipfamily.Of(f.Local.Addr()).Domain()
	r.Priority = Priority
	r.Table = Table
	r.Protocol = Protocol
	r.IPProto = int(f.Protocol)
	r.Src = host(f.Endpoint.Addr())
	r.Dst = host(f.Local.Addr())
	r.Sport = netlink.NewRulePortRange(f.Endpoint.Port(), f.Endpoint.Port())
	r.Dport = netlink.NewRulePortRange(f.Local.Port(), f.Local.Port())
	return r
}
