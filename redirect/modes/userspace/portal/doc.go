// Package portal programs the userspace mode's "portals": the iptables rules
// that steer Service traffic (cluster IPs, externalIPs, LoadBalancer ingress
// IPs, NodePorts) to the ports kproxy's relays listen on, the filter rules
// that keep those ports from being an open relay and refuse clients of
// service ports without endpoints at once, and the sockets that claim
// NodePorts so nothing else on the node can take them.
//
// The desired state is a pure function (Build) of the service ports, their
// proxy ports and the node's addresses; an Applier writes it with one
// iptables-restore --noflush per sync and keeps the few jump rules from the
// built-in chains in place with go-iptables; a Claimer holds the NodePort
// sockets.
package portal

// Chains kproxy owns. The nat chain names are kube-proxy's old userspace
// mode's, so operators' tools and habits still work.
const (
	// ChainPortalsContainer (nat, from PREROUTING) redirects traffic from
	// pods and other hosts addressed to cluster, external and LoadBalancer IPs.
	ChainPortalsContainer = "KUBE-PORTALS-CONTAINER"
	// ChainPortalsHost (nat, from OUTPUT) does the same for traffic the node
	// itself generates.
	ChainPortalsHost = "KUBE-PORTALS-HOST"
	// ChainNodePortContainer (nat, from PREROUTING for local destinations)
	// redirects NodePort traffic arriving from elsewhere.
	ChainNodePortContainer = "KUBE-NODEPORT-CONTAINER"
	// ChainNodePortHost (nat, from OUTPUT for local destinations) redirects
	// NodePort traffic the node itself generates.
	ChainNodePortHost = "KUBE-NODEPORT-HOST"
	// ChainProxyPorts (filter, from INPUT) decides what may reach a proxy
	// port: packets addressed straight to one are refused (only traffic a
	// portal redirected may reach the relays), and so are new connections a
	// portal redirected for a traffic class without endpoints (see refuse).
	ChainProxyPorts = "KUBE-PROXY-PORTS"
	// ChainNoLocalEndpoints (filter, from KUBE-PROXY-PORTS) drops new
	// connections to a traffic class a Local policy left without endpoints,
	// but lets through those that start on this node (its own addresses,
	// its pods: Node.LocalPods), which the relays send to every endpoint,
	// as kube-proxy's short-circuit does.
	ChainNoLocalEndpoints = "KUBE-PROXY-NO-LOCAL"
	// ChainFirewall (filter, from INPUT, FORWARD and OUTPUT) refuses traffic
	// to LoadBalancer IPs from sources outside loadBalancerSourceRanges.
	ChainFirewall = "KUBE-PORTALS-FIREWALL"
	// ChainNodePortNonLocal (filter) is kube-proxy's old userspace mode's:
	// it ACCEPTed traffic to proxy ports, which kproxy's open-relay guard
	// must not be preceded by, so it is removed, never written.
	ChainNodePortNonLocal = "KUBE-NODEPORT-NON-LOCAL"
)

// Table names.
const (
	TableNAT    = "nat"
	TableFilter = "filter"
)

// natChains and filterChains are every chain kproxy declares, in the order
// the restore payload declares them.
func natChains() []string {
	return []string{ChainNodePortContainer, ChainNodePortHost, ChainPortalsContainer, ChainPortalsHost}
}

func filterChains() []string { return []string{ChainFirewall, ChainProxyPorts, ChainNoLocalEndpoints} }
