// Package kernelmode is the skeleton the kernel modes (iptables, nftables,
// IPVS) fill in: the per-family loop under the sync lock (Families), the
// full-or-partial decision with a failure forcing the next sync full
// (Resync), kube-proxy's rule-sync metrics per family (RuleSync), the
// node's configuration read from each snapshot (Node, Facts), building
// each service port while a port the model rejects keeps what was last
// programmed for it (BuildPorts), and /services' view (Programmed). A
// mode brings its rule model and its write path.
package kernelmode

import (
	"errors"
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Node is what one family of a kernel mode is configured with about this
// node; Read completes it from each snapshot.
type Node struct {
	Family ipfamily.Family
	// Name is this node's name (--hostname-override), for topology.
	Name string
	// NodePorts is --nodeport-addresses, resolved at each sync.
	NodePorts nodeaddr.Policy
	// NodeCIDR: the local-traffic detector is the Node's pod CIDRs
	// (--detect-local-mode=NodeCIDR), read from each snapshot.
	NodeCIDR bool
	// LocalAddrs lists the node's interface addresses; nil: not needed.
	LocalAddrs func() ([]netip.Addr, error)
}

// Facts is what one snapshot says about this node, for one family.
type Facts struct {
	// Node is the Node object; nil before it is known.
	Node     *servicemap.NodeInfo
	Topology servicemap.Topology
	// NodePortAddresses is --nodeport-addresses for this Node.
	NodePortAddresses []netip.Prefix
	// NodeIPs are the Node's addresses of the family.
	NodeIPs []netip.Addr
}

// Read returns what snap says about this node.
func (n Node) Read(snap *servicemap.Snapshot) Facts {
	f := Facts{Topology: servicemap.TopologyOf(n.Name, snap)}
	if snap != nil {
		f.Node = snap.Node
	}
	f.NodePortAddresses = n.NodePorts.For(n.Family, f.Node)
	if f.Node != nil {
		f.NodeIPs = ipfamily.Addrs(f.Node.Addresses, n.Family)
	}
	return f
}

// LocalCIDRs returns, under the NodeCIDR detector (ok), the ranges that
// take the configured cluster CIDRs' place: the Node's pod CIDRs of the
// family, none before the Node is known (kube-proxy then has no detector).
func (n Node) LocalCIDRs(f Facts) (cidrs []netip.Prefix, ok bool) {
	if !n.NodeCIDR {
		return nil, false
	}
	if f.Node != nil {
		cidrs = ipfamily.Prefixes(f.Node.PodCIDRs, n.Family)
	}
	return cidrs, true
}

// Addrs lists the node's interface addresses of the family (none when
// LocalAddrs is nil).
func (n Node) Addrs() ([]netip.Addr, error) {
	if n.LocalAddrs == nil {
		return nil, nil
	}
	addrs, err := n.LocalAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the node's addresses: %w", err)
	}
	return ipfamily.Addrs(addrs, n.Family), nil
}

// BuildPorts builds the named ports of snap with build. A name snap does
// not hold maps to nil (the port is gone). A port build rejects keeps
// last[name] (nil when it had none), is counted by rejected and its error
// (which names the port) joined to the returned one: bad input for one service never takes down
// the others, nor its own previous rules.
func BuildPorts[P any](snap *servicemap.Snapshot, names []servicemap.ServicePortName, last map[servicemap.ServicePortName]*P,
	build func(*servicemap.ServicePort) (*P, error), rejected func()) (map[servicemap.ServicePortName]*P, error) {
	out := make(map[servicemap.ServicePortName]*P, len(names))
	var errs []error
	for _, name := range names {
		sp, ok := snap.Get(name)
		if !ok {
			out[name] = nil
			continue
		}
		p, err := build(sp)
		if err != nil {
			errs = append(errs, err)
			rejected()
			out[name] = last[name]
			continue
		}
		out[name] = p
	}
	return out, errors.Join(errs...)
}
