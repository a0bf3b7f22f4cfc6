package handles_test

import (
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// setsEnv is an IPSets with a way to make an iptables rule use a set, which
// makes the kernel refuse to destroy it.
type setsEnv struct {
	sets      handles.IPSets
	reference func(spec desired.SetSpec) error
}

// contractSetSpecs are one of the mode's sets of every type, in both
// families: their real names, types and families.
func contractSetSpecs() []desired.SetSpec {
	var out []desired.SetSpec
	for _, fam := range []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6} {
		seen := make(map[string]bool)
		for _, spec := range desired.SetSpecs(fam) {
			if !seen[spec.Type] {
				seen[spec.Type] = true
				out = append(out, spec)
			}
		}
	}
	return out
}

// setMembers are members of the kinds desired builds for a set of spec's
// type and family, sorted.
func setMembers(spec desired.SetSpec) []desired.Entry {
	v6 := spec.Family == ipfamily.IPv6
	ip := func(v4, v6addr string) netip.Addr {
		if v6 {
			return netip.MustParseAddr(v6addr)
		}
		return netip.MustParseAddr(v4)
	}
	net := func(v4, v6net string) netip.Prefix {
		if v6 {
			return netip.MustParsePrefix(v6net)
		}
		return netip.MustParsePrefix(v4)
	}
	vip, vip2 := ip("198.18.0.10", "fd00:18::10"), ip("198.18.0.11", "fd00:18::11")
	pod, pod2 := ip("198.19.1.11", "fd00:19::1:11"), ip("198.19.1.12", "fd00:19::1:12")
	var out []desired.Entry
	switch spec.Type {
	case desired.BitmapPort:
		out = []desired.Entry{{Port: 30080}, {Port: 32767}, {Port: 65535}}
	case desired.HashIP:
		out = []desired.Entry{{IP: vip}, {IP: vip2}}
	case desired.HashIPPort:
		out = []desired.Entry{
			{IP: vip, Protocol: v1.ProtocolTCP, Port: 80},
			{IP: vip, Protocol: v1.ProtocolUDP, Port: 53},
			{IP: vip, Protocol: v1.ProtocolSCTP, Port: 9132},
			{IP: vip2, Protocol: v1.ProtocolTCP, Port: 80},
		}
	case desired.HashIPPortIP:
		out = []desired.Entry{
			{IP: pod, Protocol: v1.ProtocolTCP, Port: 8080, IP2: pod},
			{IP: pod2, Protocol: v1.ProtocolUDP, Port: 53, IP2: pod2},
			{IP: pod2, Protocol: v1.ProtocolSCTP, Port: 9132, IP2: pod2},
		}
	case desired.HashIPPortNet:
		out = []desired.Entry{
			{IP: vip, Protocol: v1.ProtocolTCP, Port: 80, Net: net("198.19.128.0/17", "fd00:19:8000::/33")},
			{IP: vip, Protocol: v1.ProtocolTCP, Port: 80, Net: net("198.19.0.1/32", "fd00:19::1/128")},
			{IP: vip, Protocol: v1.ProtocolUDP, Port: 53, Net: net("128.0.0.0/1", "8000::/1")},
			{IP: vip2, Protocol: v1.ProtocolSCTP, Port: 9132, Net: net("198.19.0.0/16", "fd00:19::/64")},
		}
	}
	slices.SortFunc(out, desired.Entry.Compare)
	return out
}

func setsCases() []contractCase[setsEnv] {
	var cases []contractCase[setsEnv]
	for _, spec := range contractSetSpecs() {
		cases = append(cases, setRoundTripCases(spec, setMembers(spec))...)
		cases = append(cases, missingSetCases(spec, setMembers(spec)[0])...)
	}
	cases = append(cases, setShapeCases()...)
	return append(cases, largeSetCases()...)
}

// largeSetCases fill sets past what one netlink message of a listing
// holds, so List must read a dump of several parts.
func largeSetCases() []contractCase[setsEnv] {
	specs := contractSetSpecs()
	var cases []contractCase[setsEnv]
	for _, typ := range []string{desired.BitmapPort, desired.HashIPPort} {
		spec := specs[slices.IndexFunc(specs, func(s desired.SetSpec) bool { return s.Type == typ })]
		members := manyMembers(typ, 3000)
		cases = append(cases, contractCase[setsEnv]{
			name:  fmt.Sprintf("%s %s lists %d members", spec.Family, spec.Type, len(members)),
			setup: func(e setsEnv) error { return create(e, spec, members...) },
			call:  func(e setsEnv) error { return listsExactly(e, spec, members) },
			want:  "ok", after: rendered(spec, members),
		})
	}
	return cases
}

// manyMembers makes n distinct IPv4 members of a bitmap:port or
// hash:ip,port set, sorted.
func manyMembers(typ string, n int) []desired.Entry {
	out := make([]desired.Entry, 0, n)
	for i := range n {
		if typ == desired.BitmapPort {
			out = append(out, desired.Entry{Port: uint16(30000 + i)})
			continue
		}
		ip := netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(i%250 + 1)})
		out = append(out, desired.Entry{IP: ip, Protocol: v1.ProtocolTCP, Port: 80})
	}
	slices.SortFunc(out, desired.Entry.Compare)
	return out
}

func create(e setsEnv, spec desired.SetSpec, members ...desired.Entry) error {
	if err := e.sets.Create(spec); err != nil {
		return fmt.Errorf("creating %s: %w", spec.Name, err)
	}
	return addAll(e, spec, members...)
}

func addAll(e setsEnv, spec desired.SetSpec, members ...desired.Entry) error {
	for _, m := range members {
		if err := e.sets.Add(spec.Name, m); err != nil {
			return fmt.Errorf("adding %s to %s: %w", m, spec.Name, err)
		}
	}
	return nil
}

func delAll(e setsEnv, spec desired.SetSpec, members ...desired.Entry) error {
	for _, m := range members {
		if err := e.sets.Del(spec.Name, m); err != nil {
			return fmt.Errorf("deleting %s from %s: %w", m, spec.Name, err)
		}
	}
	return nil
}

// listsExactly fails unless List reads back exactly want, field by field
// (the rendered readback could hide a field a type does not print).
func listsExactly(e setsEnv, spec desired.SetSpec, want []desired.Entry) error {
	got, err := e.sets.List(spec.Name)
	if err != nil {
		return err
	}
	got = slices.SortedFunc(slices.Values(got), desired.Entry.Compare)
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s lists %+v, want %+v", spec.Name, got, want)
	}
	return nil
}

// setRoundTripCases create, fill, list, empty and destroy one set, and
// meet each error the reconciler tolerates on it.
func setRoundTripCases(spec desired.SetSpec, members []desired.Entry) []contractCase[setsEnv] {
	name := func(what string) string { return fmt.Sprintf("%s %s %s", spec.Family, spec.Type, what) }
	first, rest := members[0], members[1:]
	return []contractCase[setsEnv]{
		{
			name:  name("add and list"),
			setup: func(e setsEnv) error { return e.sets.Create(spec) },
			call: func(e setsEnv) error {
				return all(func() error { return addAll(e, spec, members...) }, func() error { return listsExactly(e, spec, members) })
			},
			want: "ok", after: rendered(spec, members),
		},
		{
			name:  name("create existing"),
			setup: func(e setsEnv) error { return create(e, spec, first) },
			call:  func(e setsEnv) error { return e.sets.Create(spec) },
			want:  "EEXIST", after: rendered(spec, []desired.Entry{first}),
		},
		{
			name:  name("add present member"),
			setup: func(e setsEnv) error { return create(e, spec, members...) },
			call:  func(e setsEnv) error { return e.sets.Add(spec.Name, first) },
			want:  "IPSET_ERR_EXIST", after: rendered(spec, members),
		},
		{
			name:  name("delete members"),
			setup: func(e setsEnv) error { return create(e, spec, members...) },
			call: func(e setsEnv) error {
				return all(func() error { return delAll(e, spec, members...) }, func() error { return listsExactly(e, spec, nil) })
			},
			want: "ok", after: rendered(spec, nil),
		},
		{
			name:  name("delete absent member"),
			setup: func(e setsEnv) error { return create(e, spec, rest...) },
			call:  func(e setsEnv) error { return e.sets.Del(spec.Name, first) },
			want:  "IPSET_ERR_EXIST", after: rendered(spec, rest),
		},
		{
			name:  name("destroy"),
			setup: func(e setsEnv) error { return create(e, spec, members...) },
			call:  func(e setsEnv) error { return e.sets.Destroy(spec.Name) },
			want:  "ok", after: []string{},
		},
		{
			name: name("destroy referenced"),
			setup: func(e setsEnv) error {
				return all(func() error { return create(e, spec, first) }, func() error { return e.reference(spec) })
			},
			call: func(e setsEnv) error { return e.sets.Destroy(spec.Name) },
			want: "IPSET_ERR_BUSY", after: rendered(spec, []desired.Entry{first}),
		},
	}
}

// missingSetCases call every operation on a set that does not exist.
func missingSetCases(spec desired.SetSpec, member desired.Entry) []contractCase[setsEnv] {
	name := func(what string) string { return fmt.Sprintf("%s %s %s", spec.Family, spec.Type, what) }
	return []contractCase[setsEnv]{
		{name: name("add to missing set"), call: func(e setsEnv) error { return e.sets.Add(spec.Name, member) }, want: "ENOENT", after: []string{}},
		{name: name("delete from missing set"), call: func(e setsEnv) error { return e.sets.Del(spec.Name, member) }, want: "ENOENT", after: []string{}},
		{name: name("list missing set"), call: func(e setsEnv) error { _, err := e.sets.List(spec.Name); return err }, want: "ENOENT", after: []string{}},
		{name: name("destroy missing set"), call: func(e setsEnv) error { return e.sets.Destroy(spec.Name) }, want: "ENOENT", after: []string{}},
	}
}

// setShapeCases add members that do not fit their set, and members the
// kernel stores differently from how they were given.
func setShapeCases() []contractCase[setsEnv] {
	specs := contractSetSpecs()
	spec := func(fam ipfamily.Family, typ string) desired.SetSpec {
		i := slices.IndexFunc(specs, func(s desired.SetSpec) bool { return s.Family == fam && s.Type == typ })
		return specs[i]
	}
	ipPort4, ipPort6 := spec(ipfamily.IPv4, desired.HashIPPort), spec(ipfamily.IPv6, desired.HashIPPort)
	ports, ips6 := spec(ipfamily.IPv4, desired.BitmapPort), spec(ipfamily.IPv6, desired.HashIP)
	nets4, nets6 := spec(ipfamily.IPv4, desired.HashIPPortNet), spec(ipfamily.IPv6, desired.HashIPPortNet)
	vip4, vip6 := netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("fd00:18::10")
	netMember := func(vip netip.Addr, n string) desired.Entry {
		return desired.Entry{IP: vip, Protocol: v1.ProtocolTCP, Port: 80, Net: netip.MustParsePrefix(n)}
	}
	addTo := func(spec desired.SetSpec, m desired.Entry) func(setsEnv) error {
		return func(e setsEnv) error { return e.sets.Add(spec.Name, m) }
	}
	created := func(spec desired.SetSpec) func(setsEnv) error {
		return func(e setsEnv) error { return e.sets.Create(spec) }
	}
	return []contractCase[setsEnv]{
		{
			name: "create existing name with another type", setup: created(ipPort4),
			call: func(e setsEnv) error { s := ipPort4; s.Type = desired.HashIP; return e.sets.Create(s) },
			want: "EEXIST", after: rendered(ipPort4, nil),
		},
		{
			name: "create a set of an unknown type",
			call: func(e setsEnv) error { s := ipPort4; s.Type = "hash:kproxy"; return e.sets.Create(s) },
			want: "IPSET_ERR_FIND_TYPE", after: []string{},
		},
		{
			name: "IPv4 hash:ip,port refuses an IPv6 member", setup: created(ipPort4),
			call: addTo(ipPort4, desired.Entry{IP: vip6, Protocol: v1.ProtocolTCP, Port: 80}),
			want: "IPSET_ERR_PROTOCOL", after: rendered(ipPort4, nil),
		},
		{
			name: "IPv6 hash:ip,port refuses an IPv4 member", setup: created(ipPort6),
			call: addTo(ipPort6, desired.Entry{IP: vip4, Protocol: v1.ProtocolTCP, Port: 80}),
			want: "IPSET_ERR_PROTOCOL", after: rendered(ipPort6, nil),
		},
		{
			name: "IPv6 hash:ip refuses an IPv4 member", setup: created(ips6),
			call: addTo(ips6, desired.Entry{IP: vip4}),
			want: "IPSET_ERR_PROTOCOL", after: rendered(ips6, nil),
		},
		{
			name: "hash:ip,port refuses a bare port", setup: created(ipPort4),
			call: addTo(ipPort4, desired.Entry{Port: 80}),
			want: "IPSET_ERR_PROTOCOL", after: rendered(ipPort4, nil),
		},
		{
			name: "bitmap:port refuses an address", setup: created(ports),
			call: addTo(ports, desired.Entry{IP: vip4}),
			want: "IPSET_ERR_PROTOCOL", after: rendered(ports, nil),
		},
		{
			name: "IPv4 hash:ip,port,net stores the network of a host address", setup: created(nets4),
			call: addTo(nets4, netMember(vip4, "198.19.1.5/24")),
			want: "ok", after: rendered(nets4, []desired.Entry{netMember(vip4, "198.19.1.0/24")}),
		},
		{
			name: "IPv6 hash:ip,port,net stores the network of a host address", setup: created(nets6),
			call: addTo(nets6, netMember(vip6, "fd00:19::5/64")),
			want: "ok", after: rendered(nets6, []desired.Entry{netMember(vip6, "fd00:19::/64")}),
		},
		{
			name: "hash:ip,port,net deletes by network", setup: func(e setsEnv) error { return create(e, nets4, netMember(vip4, "198.19.1.0/24")) },
			call: func(e setsEnv) error { return e.sets.Del(nets4.Name, netMember(vip4, "198.19.1.77/24")) },
			want: "ok", after: rendered(nets4, nil),
		},
		{
			name: "IPv4 hash:ip,port,net refuses 0.0.0.0/0", setup: created(nets4),
			call: addTo(nets4, netMember(vip4, "0.0.0.0/0")),
			want: "IPSET_ERR_INVALID_CIDR", after: rendered(nets4, nil),
		},
		{
			name: "IPv6 hash:ip,port,net refuses ::/0", setup: created(nets6),
			call: addTo(nets6, netMember(vip6, "::/0")),
			want: "IPSET_ERR_INVALID_CIDR", after: rendered(nets6, nil),
		},
	}
}

// rendered is how readSets shows spec holding members.
func rendered(spec desired.SetSpec, members []desired.Entry) []string {
	if len(members) == 0 {
		return []string{spec.Name + " (empty)"}
	}
	out := make([]string, 0, len(members))
	for _, m := range members {
		out = append(out, spec.Name+" "+m.String())
	}
	slices.Sort(out)
	return out
}

// readSets renders every contract set that exists with its members.
func readSets(e setsEnv) ([]string, error) {
	out := []string{}
	for _, spec := range contractSetSpecs() {
		members, err := e.sets.List(spec.Name)
		if handles.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", spec.Name, err)
		}
		out = append(out, rendered(spec, members)...)
	}
	slices.Sort(out)
	return out, nil
}
