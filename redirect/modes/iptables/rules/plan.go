package rules

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// maxNameLen bounds "ns/name:port" so that the longest comment built from
// it ("other traffic to <name> will be dropped by KUBE-PROXY-FIREWALL")
// stays within the comment match's 255 characters.
const maxNameLen = 255 - len("other traffic to  will be dropped by KUBE-PROXY-FIREWALL")

// portPlan is what kube-proxy decides about one service port in one family,
// before any text is written.
type portPlan struct {
	name  string // "ns/name:port": comments, and the hash input with proto
	proto string // "tcp", "udp" or "sctp"
	hash  [hashLen]byte

	clusterIP           netip.Addr
	port                uint16
	nodePort            uint16
	healthCheckNodePort uint16
	externalIPs         []netip.Addr
	lbIPs               []netip.Addr
	sourceRanges        []netip.Prefix
	affinitySeconds     uint64 // 0: no ClientIP affinity

	// clusterEPs and localEPs are the endpoints of the Cluster and Local
	// traffic policies (nil when the port never uses that policy);
	// reachable is their union, one KUBE-SEP chain each.
	clusterEPs, localEPs, reachable []servicemap.Endpoint

	hasEndpoints bool // usable endpoints anywhere in the cluster
	hasInternal  bool // cluster IP traffic has somewhere to go
	hasExternal  bool // external traffic from outside the node has somewhere to go
	// internalLocal and externalLocal: the policy chain for that kind of
	// traffic is KUBE-SVL (traffic policy Local), else KUBE-SVC.
	internalLocal, externalLocal bool

	usesClusterChain  bool // KUBE-SVC
	usesLocalChain    bool // KUBE-SVL
	usesExternalChain bool // KUBE-EXT
	usesFirewallChain bool // KUBE-FW
	// allowFromNode: a source range holds a node IP, so the LoadBalancer
	// IPs themselves are allowed as sources (a node reaching its own VIP
	// loops back with the VIP as source).
	allowFromNode bool
}

// plan decides everything about sp for the Builder's family; ok is false
// when sp has no cluster IP of the family and contributes nothing.
func (b *Builder) plan(sp *servicemap.ServicePort) (p portPlan, ok bool, err error) {
	p.clusterIP, ok = kernelmode.ClusterIP(sp, b.v6)
	if !ok {
		return p, false, nil
	}
	if p.proto, err = servicemap.ProtocolName(sp.Name.Protocol); err != nil {
		return p, false, err
	}
	if sp.Port == 0 {
		return p, false, errors.New("port 0 cannot be programmed")
	}
	if err := checkName(sp.Name); err != nil {
		return p, false, err
	}
	if p.affinitySeconds, err = affinitySeconds(sp.AffinityTimeout); err != nil {
		return p, false, err
	}
	p.name = kernelmode.PortName(sp.Name)
	portHashInto(&p.hash, p.name, p.proto)
	p.port, p.nodePort, p.healthCheckNodePort = sp.Port, sp.NodePort, sp.HealthCheckNodePort
	p.externalIPs = kernelmode.AddrsOf(sp.ExternalIPs, b.v6)
	p.lbIPs = kernelmode.AddrsOf(sp.LoadBalancerIPs, b.v6)
	p.sourceRanges = b.sourceRanges(sp.LoadBalancerSourceRanges)

	b.categorize(&p, sp)
	for _, ep := range p.reachable {
		if !ep.Addr.IsValid() || ep.Port == 0 {
			return p, false, fmt.Errorf("endpoint %s cannot be a DNAT destination", ep)
		}
	}
	return p, true, nil
}

// categorize sorts the endpoints into kube-proxy's policy sets and decides
// which chains the port needs.
func (b *Builder) categorize(p *portPlan, sp *servicemap.ServicePort) {
	// Accessibility is per family, as each family is its own kube-proxy.
	// Hidden external IPs (AllowServiceExternalIPs off) count, as in
	// kube-proxy's ExternallyAccessible, though nothing leads to them.
	accessible := sp.NodePort != 0 || len(p.externalIPs) > 0 || len(p.lbIPs) > 0 ||
		len(kernelmode.AddrsOf(sp.HiddenExternalIPs, b.v6)) > 0
	// Cluster endpoints are needed for Cluster policies and, with
	// externalTrafficPolicy Local, to short-circuit node-local clients.
	usesCluster := !sp.InternalPolicyLocal || accessible
	usesLocal := sp.InternalPolicyLocal || (sp.ExternalPolicyLocal && accessible)
	if usesCluster {
		p.clusterEPs = sp.EligibleEndpoints(b.v6, false, b.cfg.Topology)
	}
	if usesLocal {
		p.localEPs = sp.EligibleEndpoints(b.v6, true, b.cfg.Topology)
	}
	p.reachable = union(sp.Endpoints, p.clusterEPs, p.localEPs)
	// kube-proxy orders endpoints by their "ip:port" text; the same order
	// gives each endpoint the same --probability rule as kube-proxy's.
	p.clusterEPs = kernelmode.SortedAsText(p.clusterEPs)
	p.localEPs = kernelmode.SortedAsText(p.localEPs)
	p.reachable = kernelmode.SortedAsText(p.reachable)

	p.hasEndpoints = b.anyUsable(sp.Endpoints)
	p.internalLocal, p.externalLocal = sp.InternalPolicyLocal, sp.ExternalPolicyLocal
	p.hasInternal = p.hasEndpoints && (!p.internalLocal || len(p.localEPs) > 0)
	p.hasExternal = p.hasEndpoints && (!p.externalLocal || len(p.localEPs) > 0)

	p.usesClusterChain = len(p.clusterEPs) > 0
	p.usesLocalChain = len(p.localEPs) > 0
	// KUBE-EXT exists even without endpoints for external traffic: its
	// short-circuit for node-local clients still applies.
	p.usesExternalChain = p.hasEndpoints && accessible
	p.usesFirewallChain = p.hasEndpoints && len(p.lbIPs) > 0 && len(p.sourceRanges) > 0
	for _, r := range p.sourceRanges {
		if slices.ContainsFunc(b.cfg.NodeIPs, func(ip netip.Addr) bool { return r.Contains(ip.Unmap()) }) {
			p.allowFromNode = true
		}
	}
}

// anyUsable says whether any endpoint of the family can take traffic
// somewhere in the cluster: ready, or serving while terminating.
func (b *Builder) anyUsable(eps []servicemap.Endpoint) bool {
	for _, ep := range eps {
		if servicemap.IsIPv6(ep.Addr) == b.v6 && (ep.Ready || ep.ServingTerminating()) {
			return true
		}
	}
	return false
}

// union merges two lists drawn in order from all into one list in all's
// order, each endpoint once. When one list holds the other, it is returned
// as is.
func union(all, a, b []servicemap.Endpoint) []servicemap.Endpoint {
	switch {
	case len(b) == 0:
		return a
	case len(a) == 0:
		return b
	}
	// Walk all once to count, so that the usual case (one list holds the
	// other) costs no allocation.
	n := 0
	walkUnion(all, a, b, func(servicemap.Endpoint) { n++ })
	switch n {
	case len(a):
		return a
	case len(b):
		return b
	}
	out := make([]servicemap.Endpoint, 0, n)
	walkUnion(all, a, b, func(ep servicemap.Endpoint) { out = append(out, ep) })
	return out
}

func walkUnion(all, a, b []servicemap.Endpoint, visit func(servicemap.Endpoint)) {
	i, j := 0, 0
	for _, ep := range all {
		key := ep.AddrPort()
		inA := i < len(a) && a[i].AddrPort() == key
		inB := j < len(b) && b[j].AddrPort() == key
		if inA {
			i++
		}
		if inB {
			j++
		}
		if inA || inB {
			visit(ep)
		}
	}
}

// sourceRanges returns the ranges of the Builder's family; a zero-length
// range means every source is allowed, the same as no range at all.
func (b *Builder) sourceRanges(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range ps {
		if !r.IsValid() || servicemap.IsIPv6(r.Addr()) != b.v6 {
			continue
		}
		if r.Bits() == 0 {
			return nil
		}
		out = append(out, r)
	}
	return out
}

// affinitySeconds converts the ClientIP affinity timeout to the recent
// match's --seconds.
func affinitySeconds(d time.Duration) (uint64, error) {
	switch {
	case d == 0:
		return 0, nil
	case d < time.Second:
		return 0, fmt.Errorf("ClientIP affinity timeout %s is under the recent match's 1 s resolution", d)
	case d/time.Second > math.MaxUint32:
		return 0, fmt.Errorf("ClientIP affinity timeout %s is beyond the recent match's limit", d)
	}
	return uint64(d / time.Second), nil
}

// checkName refuses names that would not survive in a quoted iptables
// comment. Kubernetes names never contain such characters, but a services
// file is not checked by an API server.
func checkName(n servicemap.ServicePortName) error {
	if err := kernelmode.CheckNameChars(n, "an iptables comment"); err != nil {
		return err
	}
	if l := len(kernelmode.PortName(n)); l > maxNameLen {
		return fmt.Errorf("%q is %d characters long; iptables comments allow %d for it", kernelmode.PortName(n), l, maxNameLen)
	}
	return nil
}
