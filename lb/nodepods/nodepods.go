// Package nodepods says whether a client address is one of this node's pods.
// The relays ask it twice: to short-circuit a node's own external traffic
// under externalTrafficPolicy Local (lb/balancer), and to keep a pod's
// address on a dial to an endpoint elsewhere, whose replies come back
// through this node only for its own pods (lb/keepsource).
//
// The local-traffic detector names every pod of the cluster; this node's
// are those it reaches without a gateway. A pod bridge shows them as a link
// prefix, but point-to-point pod networks (a veth and a /32 route per pod,
// as CNI's ptp plugin and Calico make) do not, and pods come and go between
// syncs. So a Set holds the pods known at the last sync and asks the kernel's
// routes about a detector address it does not know, caching the answer until
// the next sync.
package nodepods

import (
	"net/netip"
	"sync"
)

// maxCached bounds the answers a Set keeps between syncs: a client that
// makes up source addresses in the pods' range costs a route lookup each,
// never unbounded memory.
const maxCached = 4096

// Set is this node's pods. The zero Set and a nil *Set hold none. Safe for
// concurrent use; replaced whole at each sync.
type Set struct {
	// Known are this node's pod prefixes at the last sync: the detector's
	// prefixes narrowed to the node's links and its gatewayless routes.
	Known []netip.Prefix
	// Detector are every pod's prefixes by the local-traffic detector.
	Detector []netip.Prefix
	// Direct reports whether the node routes an address without a gateway;
	// asked for a detector address outside Known (a pod that started after
	// the sync). Nil: such addresses are not this node's.
	Direct func(netip.Addr) bool

	mu     sync.Mutex
	direct map[netip.Addr]bool
}

// Contains says whether a is one of this node's pods.
func (s *Set) Contains(a netip.Addr) bool {
	if s == nil {
		return false
	}
	a = a.Unmap()
	if containsAddr(s.Known, a) {
		return true
	}
	if s.Direct == nil || !containsAddr(s.Detector, a) {
		return false
	}
	s.mu.Lock()
	direct, ok := s.direct[a]
	s.mu.Unlock()
	if ok {
		return direct
	}
	direct = s.Direct(a)
	s.mu.Lock()
	if s.direct == nil || len(s.direct) >= maxCached {
		s.direct = map[netip.Addr]bool{}
	}
	s.direct[a] = direct
	s.mu.Unlock()
	return direct
}

func containsAddr(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
