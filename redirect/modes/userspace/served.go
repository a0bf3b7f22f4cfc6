package userspace

import (
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// servedPorts is what /services and the per-service metrics see of the
// relays: each service port's running relays and its counters, shared by
// them. Sync changes it only when a relay starts or stops, under mu;
// readers hold mu only to copy one port's entry, never across a sync.
type servedPorts struct {
	mu    sync.RWMutex
	ports map[servicemap.ServicePortName]*servedPort
}

// servedPort is one service port's counters and relays: a handful (one per
// family and traffic class), so a slice, kept small for the tens of
// thousands of ports a node may serve.
type servedPort struct {
	counters *lbmetrics.PortCounters
	relays   []*relay
}

func newServedPorts() *servedPorts {
	return &servedPorts{ports: map[servicemap.ServicePortName]*servedPort{}}
}

// counters returns name's counters, made for its first relay.
func (s *servedPorts) counters(name servicemap.ServicePortName) *lbmetrics.PortCounters {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ports[name]
	if !ok {
		p = &servedPort{counters: &lbmetrics.PortCounters{}}
		s.ports[name] = p
	}
	return p.counters
}

// add records a started relay; its immutable fields (key, port, local,
// steered) and its atomic spec are all readers look at.
func (s *servedPorts) add(r *relay) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ports[r.key.Port]
	if !ok {
		return
	}
	if i := p.index(r.key); i >= 0 {
		p.relays[i] = r
		return
	}
	p.relays = append(p.relays, r)
}

// remove forgets a stopped relay, or a relay that failed to start (key
// only), and the port's counters with its last relay.
func (s *servedPorts) remove(key balancer.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ports[key.Port]
	if !ok {
		return
	}
	if i := p.index(key); i >= 0 {
		p.relays = slices.Delete(p.relays, i, i+1)
	}
	if len(p.relays) == 0 {
		delete(s.ports, key.Port)
	}
}

// get copies name's relays (by key order) and counters.
func (s *servedPorts) get(name servicemap.ServicePortName) ([]*relay, *lbmetrics.PortCounters) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.ports[name]
	if !ok {
		return nil, nil
	}
	out := slices.SortedFunc(slices.Values(p.relays), func(a, b *relay) int {
		if a.key.Family != b.key.Family {
			return strings.Compare(string(a.key.Family), string(b.key.Family))
		}
		return int(a.key.Class) - int(b.key.Class)
	})
	return out, p.counters
}

// index is where key's relay stands in p.relays, or -1.
func (p *servedPort) index(key balancer.Key) int {
	return slices.IndexFunc(p.relays, func(r *relay) bool { return r.key == key })
}

// each yields every port's counters, for lbmetrics.ServiceCollector. The
// entries are copied first so a scrape holds mu only for the copy.
func (s *servedPorts) each(yield func(lbmetrics.ServicePort)) {
	s.mu.RLock()
	out := make([]lbmetrics.ServicePort, 0, len(s.ports))
	for name, p := range s.ports {
		out = append(out, lbmetrics.ServicePort{Service: serviceLabel(name), Protocol: metricsProtocol(name.Protocol), Counters: p.counters})
	}
	s.mu.RUnlock()
	for _, p := range out {
		yield(p)
	}
}

// serviceLabel is "namespace/name:port", or "namespace/name" for an
// unnamed port, as kube-proxy names service ports in its rules.
func serviceLabel(n servicemap.ServicePortName) string {
	if n.Port == "" {
		return n.Namespace + "/" + n.Name
	}
	return n.Namespace + "/" + n.Name + ":" + n.Port
}

var _ mode.Describer = (*Mode)(nil)

// Programmed implements mode.Describer: a port's relays (family, class,
// portal kind, proxy port or addresses served) and their counters.
func (m *Mode) Programmed() func(servicemap.ServicePortName) mode.Programmed {
	return func(name servicemap.ServicePortName) mode.Programmed {
		relays, counters := m.served.get(name)
		var out mode.Programmed
		for _, r := range relays {
			kind := m.kinds[r.key.Family]
			if kind == contract.PortalsSKLookup && !r.steered {
				kind = contract.PortalsLocal // SCTP: the program cannot steer it
			}
			d := mode.Relay{Family: r.key.Family, Class: r.key.Class.String(), Portal: string(kind), ProxyPort: r.port}
			if r.local || r.steered {
				for _, ap := range r.spec.Load().listen {
					d.Listen = append(d.Listen, ap.String())
				}
			}
			out.Relays = append(out.Relays, d)
		}
		if len(relays) == 0 {
			out.Note = "no relay: no address of a proxied family, a protocol the kernel cannot serve, or not synced yet"
			return out
		}
		// Steered relays count too: their routes in the shared relays
		// carry the port's metrics.
		c := counters
		out.Counters = &mode.RelayCounters{
			Connections: c.Connections.Load(), Flows: c.Flows.Load(), Active: c.Active.Load(),
			DialFailures: c.DialFailures.Load(), BytesToEndpoint: c.BytesToEndpoint.Load(), BytesToClient: c.BytesToClient.Load(),
			Refused: c.Refused(),
		}
		return out
	}
}

// metricsProtocol is protocol as the relay metrics label it (lbmetrics'
// Protocol* values).
func metricsProtocol(protocol v1.Protocol) string {
	return strings.ToLower(string(protocol))
}
