package fdbudget

import (
	"fmt"
	"sync/atomic"
)

// A service port's TCP connections (and SCTP associations) each hold two
// descriptors (the client's and the endpoint's), so one service port, flooded or proxying to itself
// through a path the relays cannot recognise, could hold every descriptor
// the process may open. Port bounds them to a share of RLIMIT_NOFILE, so
// the other services, health checks and syncs keep theirs.
const (
	// PortShareDivisor: one service port's connections may hold
	// 1/PortShareDivisor of the descriptor limit.
	PortShareDivisor = 4
	// DialingShareDivisor: of those, connections still waiting for their
	// endpoint's connect may hold 1/DialingShareDivisor of the limit. A
	// connect to a reachable endpoint takes well under a millisecond, so a
	// busy service has few waiting; an unreachable one is given up after
	// the dial timeout.
	DialingShareDivisor = 16
	// minPortConnections keeps small limits usable for a busy service.
	minPortConnections = 64
	// descriptorsPerConnection: the client's socket and the endpoint's.
	descriptorsPerConnection = 2
)

// PortLimits bound one service port's TCP connections.
type PortLimits struct {
	// Connections is the most connections the port may hold, relayed or
	// waiting for a connect.
	Connections int
	// Dialing is the most of them that may wait for a connect.
	Dialing int
}

// PortLimitsFor returns the bounds of a process whose soft RLIMIT_NOFILE is
// limit.
func PortLimitsFor(limit uint64) PortLimits {
	fds := int(min(limit, 1<<30))
	return PortLimits{
		Connections: max(minPortConnections, fds/PortShareDivisor/descriptorsPerConnection),
		Dialing:     max(minPortConnections, fds/DialingShareDivisor/descriptorsPerConnection),
	}
}

// Port counts one service port's TCP connections against its limits; the
// relays of every address and family of the port share one. Safe for
// concurrent use; a nil *Port admits everything.
type Port struct {
	limits  PortLimits
	held    atomic.Int64
	dialing atomic.Int64
}

// NewPort returns a Port bounded by limits, which must be positive.
func NewPort(limits PortLimits) (*Port, error) {
	if limits.Connections <= 0 || limits.Dialing <= 0 {
		return nil, fmt.Errorf("service port limits: connections %d and dialing %d must be positive", limits.Connections, limits.Dialing)
	}
	return &Port{limits: limits}, nil
}

// PortVerdict is Port.Admit's answer.
type PortVerdict int

const (
	// PortAdmitted: the connection may dial; it must be Released.
	PortAdmitted PortVerdict = iota
	// PortDialingFull: the port's connections waiting for a connect hold
	// their whole share.
	PortDialingFull
	// PortFull: the port's connections hold its whole share.
	PortFull
)

func (v PortVerdict) String() string {
	switch v {
	case PortAdmitted:
		return "admitted"
	case PortDialingFull:
		return "service port's share of connections waiting for a connect in use"
	case PortFull:
		return "service port's share of connections in use"
	}
	return fmt.Sprintf("PortVerdict(%d)", int(v))
}

// Admit takes a new connection that is about to dial, or says which bound
// it would pass: it must then be refused. An admitted connection is
// Dialed once connected and Released when it ends.
func (p *Port) Admit() PortVerdict {
	if p == nil {
		return PortAdmitted
	}
	if p.dialing.Add(1) > int64(p.limits.Dialing) {
		p.dialing.Add(-1)
		return PortDialingFull
	}
	if p.held.Add(1) > int64(p.limits.Connections) {
		p.held.Add(-1)
		p.dialing.Add(-1)
		return PortFull
	}
	return PortAdmitted
}

// Dialed moves an admitted connection from waiting to relayed.
func (p *Port) Dialed() {
	if p != nil {
		p.dialing.Add(-1)
	}
}

// Release ends an admitted connection; dialing says it never got Dialed.
func (p *Port) Release(dialing bool) {
	if p == nil {
		return
	}
	if dialing {
		p.dialing.Add(-1)
	}
	p.held.Add(-1)
}

// Held returns the connections held and those waiting for a connect.
func (p *Port) Held() (connections, dialing int) {
	if p == nil {
		return 0, 0
	}
	return int(p.held.Load()), int(p.dialing.Load())
}

// Limits returns the port's bounds.
func (p *Port) Limits() PortLimits {
	if p == nil {
		return PortLimits{}
	}
	return p.limits
}
