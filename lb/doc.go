// Package lb is the userspace data plane of --proxy-mode=userspace: the
// balancer (lb/balancer), the TCP, UDP and SCTP relays (lb/tcprelay,
// lb/udprelay, lb/sctprelay), the event-loop core the TCP and UDP relays
// share (lb/eventloop), proxy-port allocation (lb/ports), the descriptor
// shares of UDP flows and service ports (lb/fdbudget), the relays' own
// outgoing connections for loop refusal (lb/selfdial) and the data
// plane's metrics (lb/lbmetrics). The portal rules that steer Service traffic
// to the relays are programmed by redirect/; lb never imports redirect.
//
// This file holds the one seam the relays share with the balancer.
package lb

import "net/netip"

// Picker chooses backends for one service port and traffic class. Relays hold
// one per listener; the balancer implements it.
type Picker interface {
	// Pick returns the endpoints to try for a new connection or flow from
	// client, in order: the balancer's choice first (the pinned endpoint when
	// ClientIP affinity holds), then the fail-over candidates. An empty
	// result means the service has no usable endpoint: refuse the client at
	// once.
	Pick(client netip.Addr) []netip.AddrPort
	// Connected reports that a connection from client to endpoint was
	// established, so affinity can pin it.
	Connected(client netip.Addr, endpoint netip.AddrPort)
	// Failed reports that dialling endpoint failed, so affinity that pinned
	// it is dropped.
	Failed(client netip.Addr, endpoint netip.AddrPort)
}

// SourceKeeper is what a Picker may also implement: whether its service
// port's traffic keeps the client's address to the endpoint, where
// kube-proxy's NAT would leave it (a cluster IP; an external address
// under externalTrafficPolicy: Local), rather than masquerade it.
type SourceKeeper interface {
	KeepsSource() bool
}

// KeepsSource says whether p's traffic keeps the client's address; a
// Picker that is not a SourceKeeper does not.
func KeepsSource(p Picker) bool {
	k, ok := p.(SourceKeeper)
	return ok && k.KeepsSource()
}
