package fakeipvs

import (
	"fmt"
	"strings"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// Dump renders the fakes' state as text: virtual servers with their
// destinations (weight, and connections when any), the link's addresses and
// every non-empty set. ExpectedDump renders a desired state the same way, so
// a test compares the two after a reconcile.
func Dump(v *IPVS, l *Link, s *IPSets) string {
	var sb strings.Builder
	sb.WriteString("# virtual servers\n")
	v.mu.Lock()
	services := sortedKeys(v.services)
	for _, k := range services {
		fs := v.services[k]
		vs, _ := handles.FromService(&fs.svc)
		sb.WriteString(desired.DescribeVirtualServer(vs) + "\n")
		for _, ap := range sortedAddrPorts(fs.dests) {
			d := fs.dests[ap]
			fmt.Fprintf(&sb, "  -> %s weight %d", ap, d.Weight)
			if d.ActiveConnections+d.InactiveConnections > 0 {
				fmt.Fprintf(&sb, " connections %d/%d", d.ActiveConnections, d.InactiveConnections)
			}
			sb.WriteString("\n")
		}
	}
	v.mu.Unlock()
	sb.WriteString("# addresses on " + handles.DummyLink + "\n")
	if l.Exists() {
		addrs, _ := l.peek()
		for _, a := range addrs {
			sb.WriteString(a.String() + "\n")
		}
	}
	sb.WriteString("# sets\n")
	s.mu.Lock()
	for _, name := range sortedNames(s.sets) {
		set := s.sets[name]
		if len(set.members) == 0 {
			continue
		}
		sb.WriteString(name + "\n")
		for _, e := range sortedEntries(set.members) {
			sb.WriteString("  " + e.String() + "\n")
		}
	}
	s.mu.Unlock()
	return sb.String()
}

// ExpectedDump renders st as Dump would render fakes that hold exactly it.
func ExpectedDump(st *desired.State) string {
	var sb strings.Builder
	sb.WriteString("# virtual servers\n")
	for _, svc := range st.Services {
		sb.WriteString(desired.DescribeVirtualServer(svc.VirtualServer) + "\n")
		for _, rs := range svc.RealServers {
			fmt.Fprintf(&sb, "  -> %s weight %d\n", rs.AddrPort(), rs.Weight)
		}
	}
	sb.WriteString("# addresses on " + handles.DummyLink + "\n")
	for _, a := range st.Addresses {
		sb.WriteString(a.String() + "\n")
	}
	sb.WriteString("# sets\n")
	sets := make(map[string]*fakeSet)
	for _, set := range st.Sets {
		m := make(map[desired.Entry]bool)
		for _, e := range set.Members {
			m[e] = true
		}
		sets[set.Spec.Name] = &fakeSet{spec: set.Spec, members: m}
	}
	for _, name := range sortedNames(sets) {
		if len(sets[name].members) == 0 {
			continue
		}
		sb.WriteString(name + "\n")
		for _, e := range sortedEntries(sets[name].members) {
			sb.WriteString("  " + e.String() + "\n")
		}
	}
	return sb.String()
}
