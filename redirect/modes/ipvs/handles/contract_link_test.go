package handles_test

import (
	"errors"
	"net/netip"
	"slices"
	"syscall"

	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// linkEnv is kube-ipvs0 as the mode sees it: one handle per family over
// the same link.
type linkEnv struct {
	v4, v6 handles.Link
	// create makes the link exist: EnsureLink, or a stand-in on a kernel
	// without dummy links.
	create func() error
	// removeBehind and createBehind delete and create the link without
	// the handles, as someone else would: a handle that remembers the
	// link must notice.
	removeBehind, createBehind func() error
}

// needsDummy marks cases that only EnsureLink itself can set up.
const needsDummy = "dummy links"

func linkCases() []contractCase[linkEnv] {
	a4, b4 := netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.11")
	a6 := netip.MustParseAddr("fd00:18::10")
	created := func(e linkEnv) error { return e.create() }
	withAddrs := func(e linkEnv) error {
		return all(e.create, func() error { return e.v4.AddAddr(a4) }, func() error { return e.v6.AddAddr(a6) })
	}
	cases := []contractCase[linkEnv]{
		{name: "EnsureLink creates the link", needs: needsDummy, call: func(e linkEnv) error { return e.v4.EnsureLink() }, want: "ok", after: []string{"link"}},
		{name: "EnsureLink of a present link", setup: created, call: func(e linkEnv) error { return e.v6.EnsureLink() }, want: "ok", after: []string{"link"}},
		{name: "EnsureLink keeps the addresses", setup: withAddrs, call: func(e linkEnv) error { return e.v4.EnsureLink() },
			want: "ok", after: []string{"link", "v4 198.18.0.10", "v6 fd00:18::10"}},
		{
			name: "each family's handle lists its own addresses",
			setup: func(e linkEnv) error {
				return all(func() error { return withAddrs(e) }, func() error { return e.v4.AddAddr(b4) })
			},
			call: func(linkEnv) error { return nil },
			want: "ok", after: []string{"link", "v4 198.18.0.10", "v4 198.18.0.11", "v6 fd00:18::10"},
		},
		{name: "DeleteLink takes the addresses", setup: withAddrs, call: func(e linkEnv) error { return e.v4.DeleteLink() }, want: "ok", after: []string{}},
		{
			name: "a recreated link has no addresses", needs: needsDummy, setup: withAddrs,
			call: func(e linkEnv) error { return all(e.v4.DeleteLink, e.v4.EnsureLink) },
			want: "ok", after: []string{"link"},
		},
		{name: "DeleteLink of a missing link", call: func(e linkEnv) error { return e.v4.DeleteLink() }, want: "ENODEV", after: []string{}},
	}
	for _, fam := range []struct {
		name   string
		handle func(linkEnv) handles.Link
		addr   netip.Addr
		line   string
	}{
		{"IPv4", func(e linkEnv) handles.Link { return e.v4 }, a4, "v4 198.18.0.10"},
		{"IPv6", func(e linkEnv) handles.Link { return e.v6 }, a6, "v6 fd00:18::10"},
	} {
		add := func(e linkEnv) error { return fam.handle(e).AddAddr(fam.addr) }
		del := func(e linkEnv) error { return fam.handle(e).DelAddr(fam.addr) }
		list := func(e linkEnv) error { _, err := fam.handle(e).Addrs(); return err }
		addTo := func(e linkEnv) error { return all(e.create, func() error { return add(e) }) }
		// The handle has used the link, which is then deleted (and
		// recreated, under a new index) behind its back.
		usedThenRemoved := func(e linkEnv) error { return all(func() error { return addTo(e) }, e.removeBehind) }
		usedThenRecreated := func(e linkEnv) error { return all(func() error { return usedThenRemoved(e) }, e.createBehind) }
		cases = append(cases, []contractCase[linkEnv]{
			{name: fam.name + " add address", setup: created, call: add, want: "ok", after: []string{"link", fam.line}},
			{name: fam.name + " add address twice", setup: addTo, call: add, want: "EEXIST", after: []string{"link", fam.line}},
			{name: fam.name + " delete address", setup: addTo, call: del, want: "ok", after: []string{"link"}},
			{name: fam.name + " delete absent address", setup: created, call: del, want: "EADDRNOTAVAIL", after: []string{"link"}},
			{name: fam.name + " add address while the link is missing", call: add, want: "ENODEV", after: []string{}},
			{name: fam.name + " delete address while the link is missing", call: del, want: "ENODEV", after: []string{}},
			{name: fam.name + " list addresses while the link is missing", call: list, want: "ENODEV", after: []string{}},
			{name: fam.name + " add address after the link was deleted behind the handle's back", setup: usedThenRemoved, call: add, want: "ENODEV", after: []string{}},
			{name: fam.name + " delete address after the link was deleted behind the handle's back", setup: usedThenRemoved, call: del, want: "ENODEV", after: []string{}},
			{name: fam.name + " add address after the link was recreated behind the handle's back", setup: usedThenRecreated, call: add, want: "ok", after: []string{"link", fam.line}},
			{name: fam.name + " delete address after the link was recreated behind the handle's back", setup: usedThenRecreated, call: del, want: "EADDRNOTAVAIL", after: []string{"link"}},
			{name: fam.name + " list addresses after the link was recreated behind the handle's back", setup: usedThenRecreated, call: list, want: "ok", after: []string{"link"}},
		}...)
	}
	return cases
}

// readLink renders whether the link exists and each family handle's
// addresses.
func readLink(e linkEnv) ([]string, error) {
	v4, err := e.v4.Addrs()
	if errors.Is(err, syscall.ENODEV) {
		if _, err6 := e.v6.Addrs(); !errors.Is(err6, syscall.ENODEV) {
			return nil, errors.New("the IPv4 handle finds no link, the IPv6 handle does")
		}
		return []string{}, nil
	}
	if err != nil {
		return nil, err
	}
	v6, err := e.v6.Addrs()
	if err != nil {
		return nil, err
	}
	out := []string{"link"}
	for _, a := range v4 {
		out = append(out, "v4 "+a.String())
	}
	for _, a := range v6 {
		out = append(out, "v6 "+a.String())
	}
	slices.Sort(out)
	return out, nil
}
