package handles_test

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/moby/ipvs"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// ipvsFamily is one family's addresses for the IPVS cases.
type ipvsFamily struct {
	name          string
	vip, vip2     netip.Addr
	pod1, pod2    netip.AddrPort
	netmask       uint32
	addressFamily uint16
}

func ipvsFamilies() []ipvsFamily {
	return []ipvsFamily{
		{"IPv4", netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.11"),
			netip.MustParseAddrPort("198.19.1.11:8080"), netip.MustParseAddrPort("198.19.1.12:8080"), 0xffffffff, 2},
		{"IPv6", netip.MustParseAddr("fd00:18::10"), netip.MustParseAddr("fd00:18::11"),
			netip.MustParseAddrPort("[fd00:19::1:11]:8080"), netip.MustParseAddrPort("[fd00:19::1:12]:8080"), 128, 10},
	}
}

func virtualServer(addr netip.Addr, proto v1.Protocol, port uint16, sched string) desired.VirtualServer {
	return desired.VirtualServer{Key: desired.Key{Addr: addr, Protocol: proto, Port: port}, Scheduler: sched}
}

func persistent(vs desired.VirtualServer, timeout uint32) desired.VirtualServer {
	vs.Flags |= desired.FlagPersistent
	vs.Timeout = timeout
	return vs
}

func realServer(ap netip.AddrPort, weight int) desired.RealServer {
	return desired.RealServer{Addr: ap.Addr(), Port: ap.Port(), Weight: weight}
}

func newService(vs desired.VirtualServer, rs ...desired.RealServer) func(handles.IPVS) error {
	return func(h handles.IPVS) error {
		s := handles.ToService(vs)
		if err := h.NewService(s); err != nil {
			return fmt.Errorf("adding %s: %w", vs.Key, err)
		}
		for _, r := range rs {
			if err := h.NewDestination(s, handles.ToDestination(r)); err != nil {
				return fmt.Errorf("adding %s to %s: %w", r.AddrPort(), vs.Key, err)
			}
		}
		return nil
	}
}

func ipvsCases() []contractCase[handles.IPVS] {
	var cases []contractCase[handles.IPVS]
	for _, f := range ipvsFamilies() {
		cases = append(cases, ipvsServiceCases(f)...)
		cases = append(cases, ipvsDestinationCases(f)...)
	}
	f := ipvsFamilies()[0]
	tcp, udp := virtualServer(f.vip, v1.ProtocolTCP, 80, "rr"), virtualServer(f.vip, v1.ProtocolUDP, 80, "rr")
	return append(cases, contractCase[handles.IPVS]{
		name: "flush", setup: func(h handles.IPVS) error {
			return all(func() error { return newService(tcp, realServer(f.pod1, 1))(h) }, func() error { return newService(udp)(h) })
		},
		call: func(h handles.IPVS) error { return h.Flush() }, want: "ok", after: []string{},
	}, largeTableCase(f, 400, 400))
}

// largeTableCase lists more services, and more real servers of one, than
// one netlink message of a dump holds.
func largeTableCase(f ipvsFamily, services, realServers int) contractCase[handles.IPVS] {
	big := virtualServer(f.vip, v1.ProtocolTCP, 80, "rr")
	var rs []desired.RealServer
	for i := range realServers {
		rs = append(rs, realServer(netip.AddrPortFrom(f.pod1.Addr(), uint16(10000+i)), 1))
	}
	var after []string
	setup := []func(handles.IPVS) error{newService(big, rs...)}
	after = append(after, f.holds(big, rs...)...)
	for i := 1; i < services; i++ {
		vs := virtualServer(f.vip, v1.ProtocolTCP, uint16(1000+i), "rr")
		setup = append(setup, newService(vs))
		after = append(after, f.holds(vs)...)
	}
	return contractCase[handles.IPVS]{
		name: fmt.Sprintf("%s list %d services, one with %d real servers", f.name, services, realServers),
		setup: func(h handles.IPVS) error {
			for _, s := range setup {
				if err := s(h); err != nil {
					return err
				}
			}
			return nil
		},
		call: func(handles.IPVS) error { return nil },
		want: "ok", after: after,
	}
}

func ipvsServiceCases(f ipvsFamily) []contractCase[handles.IPVS] {
	name := func(what string) string { return f.name + " " + what }
	tcp := virtualServer(f.vip, v1.ProtocolTCP, 80, "rr")
	affinity := persistent(virtualServer(f.vip, v1.ProtocolUDP, 53, "wrr"), 10800)
	sctp := virtualServer(f.vip2, v1.ProtocolSCTP, 9132, "sh")
	maglev := virtualServer(f.vip2, v1.ProtocolTCP, 443, "mh")
	maglev.Flags = desired.FlagMHPort
	updated := persistent(tcp, 60)
	updated.Scheduler = "wrr"
	unknown := tcp
	unknown.Scheduler = "kproxy-none"
	missing := virtualServer(f.vip2, v1.ProtocolTCP, 80, "rr")
	missingUnknown := missing
	missingUnknown.Scheduler = unknown.Scheduler
	call := func(op func(handles.IPVS, *ipvs.Service) error, vs desired.VirtualServer) func(handles.IPVS) error {
		return func(h handles.IPVS) error { return op(h, handles.ToService(vs)) }
	}
	create := func(h handles.IPVS, s *ipvs.Service) error { return h.NewService(s) }
	update := func(h handles.IPVS, s *ipvs.Service) error { return h.UpdateService(s) }
	del := func(h handles.IPVS, s *ipvs.Service) error { return h.DelService(s) }
	var cases []contractCase[handles.IPVS]
	for _, vs := range []desired.VirtualServer{tcp, affinity, sctp, maglev} {
		cases = append(cases, contractCase[handles.IPVS]{
			name: name("new " + desired.DescribeVirtualServer(vs)), call: newService(vs), want: "ok", after: f.holds(vs),
		})
	}
	return append(cases, []contractCase[handles.IPVS]{
		{
			name:  name("services differing only in protocol"),
			setup: newService(tcp), call: newService(virtualServer(f.vip, v1.ProtocolUDP, 80, "rr")), want: "ok",
			after: append(f.holds(tcp), f.holds(virtualServer(f.vip, v1.ProtocolUDP, 80, "rr"))...),
		},
		{name: name("new service twice"), setup: newService(tcp), call: newService(tcp), want: "EEXIST", after: f.holds(tcp)},
		{name: name("new existing service with an unknown scheduler"), setup: newService(tcp), call: call(create, unknown), want: "EEXIST", after: f.holds(tcp)},
		{name: name("new service with an unknown scheduler"), call: call(create, unknown), want: "ENOENT", after: []string{}},
		{name: name("update scheduler, persistence and timeout"), setup: newService(tcp), call: call(update, updated), want: "ok", after: f.holds(updated)},
		{name: name("update drops persistence"), setup: newService(updated), call: call(update, tcp), want: "ok", after: f.holds(tcp)},
		{name: name("update to an unknown scheduler"), setup: newService(tcp), call: call(update, unknown), want: "ENOENT", after: f.holds(tcp)},
		{name: name("update missing service"), setup: newService(tcp), call: call(update, missing), want: "ESRCH", after: f.holds(tcp)},
		{name: name("update missing service to an unknown scheduler"), call: call(update, missingUnknown), want: "ESRCH", after: []string{}},
		{
			name: name("delete service with real servers"), setup: newService(tcp, realServer(f.pod1, 1)),
			call: call(del, tcp), want: "ok", after: []string{},
		},
		{name: name("delete missing service"), setup: newService(tcp), call: call(del, missing), want: "ESRCH", after: f.holds(tcp)},
	}...)
}

func ipvsDestinationCases(f ipvsFamily) []contractCase[handles.IPVS] {
	name := func(what string) string { return f.name + " " + what }
	vs := virtualServer(f.vip, v1.ProtocolTCP, 80, "wrr")
	missing := virtualServer(f.vip2, v1.ProtocolTCP, 80, "wrr")
	one, two := realServer(f.pod1, 1), realServer(f.pod2, 100)
	drained := realServer(f.pod1, 0)
	onOtherPort := realServer(netip.AddrPortFrom(f.pod1.Addr(), 9090), 7)
	dest := func(op func(handles.IPVS, *ipvs.Service, *ipvs.Destination) error, vs desired.VirtualServer, rs desired.RealServer) func(handles.IPVS) error {
		return func(h handles.IPVS) error { return op(h, handles.ToService(vs), handles.ToDestination(rs)) }
	}
	create := func(h handles.IPVS, s *ipvs.Service, d *ipvs.Destination) error { return h.NewDestination(s, d) }
	update := func(h handles.IPVS, s *ipvs.Service, d *ipvs.Destination) error { return h.UpdateDestination(s, d) }
	del := func(h handles.IPVS, s *ipvs.Service, d *ipvs.Destination) error { return h.DelDestination(s, d) }
	list := func(vs desired.VirtualServer) func(handles.IPVS) error {
		return func(h handles.IPVS) error {
			dests, err := h.GetDestinations(handles.ToService(vs))
			if err == nil && len(dests) > 0 {
				return fmt.Errorf("%s lists real servers %+v", vs.Key, dests)
			}
			return err
		}
	}
	withOne := newService(vs, one)
	return []contractCase[handles.IPVS]{
		{
			name: name("new real servers with weights"), setup: newService(vs),
			call: func(h handles.IPVS) error {
				return all(
					func() error { return dest(create, vs, one)(h) },
					func() error { return dest(create, vs, two)(h) },
					func() error { return dest(create, vs, onOtherPort)(h) })
			},
			want: "ok", after: f.holds(vs, one, two, onOtherPort),
		},
		{name: name("new real server twice"), setup: withOne, call: dest(create, vs, one), want: "EEXIST", after: f.holds(vs, one)},
		{name: name("new real server with a negative weight"), setup: newService(vs), call: dest(create, vs, realServer(f.pod1, -1)), want: "ERANGE", after: f.holds(vs)},
		{name: name("new present real server with a negative weight"), setup: withOne, call: dest(create, vs, realServer(f.pod1, -1)), want: "ERANGE", after: f.holds(vs, one)},
		{name: name("update real server to a negative weight"), setup: withOne, call: dest(update, vs, realServer(f.pod1, -1)), want: "ERANGE", after: f.holds(vs, one)},
		{name: name("new real server of a missing service"), setup: withOne, call: dest(create, missing, one), want: "ESRCH", after: f.holds(vs, one)},
		{name: name("drain a real server"), setup: withOne, call: dest(update, vs, drained), want: "ok", after: f.holds(vs, drained)},
		{name: name("update missing real server"), setup: withOne, call: dest(update, vs, two), want: "ENOENT", after: f.holds(vs, one)},
		{name: name("update real server of a missing service"), setup: withOne, call: dest(update, missing, one), want: "ESRCH", after: f.holds(vs, one)},
		{name: name("delete real server"), setup: withOne, call: dest(del, vs, one), want: "ok", after: f.holds(vs)},
		{name: name("delete missing real server"), setup: withOne, call: dest(del, vs, two), want: "ENOENT", after: f.holds(vs, one)},
		{name: name("delete real server of a missing service"), setup: withOne, call: dest(del, missing, one), want: "ESRCH", after: f.holds(vs, one)},
		{name: name("list real servers of a missing service"), setup: withOne, call: list(missing), want: "ok", after: f.holds(vs, one)},
	}
}

// holds is how readIPVS shows vs with real servers rs.
func (f ipvsFamily) holds(vs desired.VirtualServer, rs ...desired.RealServer) []string {
	out := []string{f.serviceLine(vs)}
	for _, r := range rs {
		out = append(out, destinationLine(vs.Key, r, f.addressFamily, ipvs.ConnFwdMasq))
	}
	return out
}

func (f ipvsFamily) serviceLine(vs desired.VirtualServer) string {
	return serviceLine(vs, vs.Flags|desired.FlagHashed, f.addressFamily, f.netmask)
}

// serviceLine shows a listed service with the raw fields FromService drops.
func serviceLine(vs desired.VirtualServer, rawFlags uint32, af uint16, netmask uint32) string {
	return fmt.Sprintf("%s %s flags %#x timeout %d af %d netmask %#x", vs.Key, vs.Scheduler, rawFlags, vs.Timeout, af, netmask)
}

func destinationLine(k desired.Key, rs desired.RealServer, af uint16, flags uint32) string {
	return fmt.Sprintf("%s -> %s weight %d af %d fwd %#x", k, rs.AddrPort(), rs.Weight, af, flags&ipvs.ConnectionFlagFwdMask)
}

// readIPVS renders every virtual server and real server h lists.
func readIPVS(h handles.IPVS) ([]string, error) {
	list, err := h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("listing services: %w", err)
	}
	out := []string{}
	for _, s := range list {
		vs, ok := handles.FromService(s)
		if !ok {
			out = append(out, fmt.Sprintf("unreadable service %+v", *s))
			continue
		}
		out = append(out, serviceLine(vs, s.Flags, s.AddressFamily, s.Netmask))
		dests, err := h.GetDestinations(s)
		if err != nil {
			return nil, fmt.Errorf("listing real servers of %s: %w", vs.Key, err)
		}
		for _, d := range dests {
			rs, ok := handles.FromDestination(d)
			if !ok {
				out = append(out, fmt.Sprintf("%s -> unreadable %+v", vs.Key, *d))
				continue
			}
			out = append(out, destinationLine(vs.Key, rs, d.AddressFamily, d.ConnectionFlags))
		}
	}
	slices.Sort(out)
	return out, nil
}
