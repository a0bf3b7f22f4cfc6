package conntrack

import (
	"cmp"
	"fmt"
	"net/netip"
)

// Answer narrows a Filter by who answers the flows it selects.
type Answer uint8

const (
	// AnyAnswer selects every flow to the destination.
	AnyAnswer Answer = iota
	// AnsweredBy selects the flows the filter's endpoint answers.
	AnsweredBy
	// Untranslated selects the flows no NAT rewrote: sent while nothing
	// programmed the destination, so they were refused or routed past it,
	// and would stay that way after rules appear.
	Untranslated
)

// Filter selects flows of one protocol by the destination they were sent
// to and, optionally, by who answers them.
type Filter struct {
	Protocol Protocol
	Dst      Destination
	Answer   Answer
	// Endpoint is the answering endpoint, for AnsweredBy.
	Endpoint netip.AddrPort
}

// AllFlowsTo selects every flow to dst.
func AllFlowsTo(proto Protocol, dst Destination) Filter {
	return Filter{Protocol: proto, Dst: dst}
}

// FlowsAnsweredBy selects the flows to dst that endpoint answers.
func FlowsAnsweredBy(proto Protocol, dst Destination, endpoint netip.AddrPort) Filter {
	endpoint = netip.AddrPortFrom(endpoint.Addr().Unmap(), endpoint.Port())
	return Filter{Protocol: proto, Dst: dst, Answer: AnsweredBy, Endpoint: endpoint}
}

// UntranslatedFlowsTo selects the flows to dst that no NAT rewrote.
func UntranslatedFlowsTo(proto Protocol, dst Destination) Filter {
	return Filter{Protocol: proto, Dst: dst, Answer: Untranslated}
}

// matches says whether flow, already known to have f's protocol and
// destination, is one f selects.
func (f Filter) matches(flow Flow) bool {
	switch f.Answer {
	case AnsweredBy:
		return flow.ReplySrc == f.Endpoint
	case Untranslated:
		return !flow.translated()
	default:
		return true
	}
}

// String renders f the way tests and logs show it, e.g.
// "udp 198.18.0.10:53 answered by 198.19.1.11:9000" or
// "udp IPv4 node port 30053 untranslated".
func (f Filter) String() string {
	switch f.Answer {
	case AnsweredBy:
		return fmt.Sprintf("%s %s answered by %s", f.Protocol, f.Dst, f.Endpoint)
	case Untranslated:
		return fmt.Sprintf("%s %s untranslated", f.Protocol, f.Dst)
	default:
		return fmt.Sprintf("%s %s", f.Protocol, f.Dst)
	}
}

// compareFilters orders filters by family, protocol, destination, answer
// and endpoint, so filter lists come out the same every time.
func compareFilters(a, b Filter) int {
	return cmp.Or(
		cmp.Compare(a.Dst.Family, b.Dst.Family),
		cmp.Compare(a.Protocol, b.Protocol),
		compareDestinations(a.Dst, b.Dst),
		cmp.Compare(a.Answer, b.Answer),
		a.Endpoint.Compare(b.Endpoint),
	)
}
