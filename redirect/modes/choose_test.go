package modes

import (
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/mode"
)

// fullIPTables is a backend that can do everything.
var fullIPTables = kernel.IPTables{Usable: true, DNAT: true, Redirect: true, RandomFully: true}

func features(edit func(f *kernel.Features)) kernel.Features {
	f := kernel.Features{
		IPv4:          kernel.FamilyIPTables{NFT: fullIPTables, Legacy: fullIPTables},
		IPv6:          kernel.FamilyIPTables{NFT: fullIPTables, Legacy: fullIPTables},
		Backend:       kernel.NFT,
		BackendReason: "no kube rules in either backend; nft is preferred",
		Conntrack:     kernel.Support{Present: true},
		IPVS:          kernel.Support{Present: true},
		IPSet:         kernel.Support{Present: true},
		DummyLinks:    kernel.Support{Present: true},
		SCTP:          kernel.Support{Present: true},
	}
	if edit != nil {
		edit(&f)
	}
	return f
}

// notProbed is a legacy backend Detect left alone on an nft node.
var notProbed = kernel.IPTables{NotProbed: true, Problem: kernel.LegacyNotProbed}

// thisHost is what the CI machine reports.
func thisHost(f *kernel.Features) {
	f.IPv4.Legacy, f.IPv6.Legacy = notProbed, notProbed
	f.IPVS = kernel.Support{Detail: `no generic netlink family "IPVS"; is the ip_vs module available?`}
	f.DummyLinks = kernel.Support{Detail: "the kernel does not know the dummy link type (no dummy module)"}
	f.SCTP = kernel.Support{Detail: "no sctp"}
}

func noBackend(f *kernel.Features) {
	f.IPv4 = kernel.FamilyIPTables{NFT: kernel.IPTables{Problem: "listing rules: iptables-nft-save: not installed"}, Legacy: kernel.IPTables{Problem: "listing rules: iptables-legacy-save: not installed"}}
	f.Backend, f.BackendReason = "", "neither backend works: listing rules: iptables-nft-save: not installed"
}

func TestChoose(t *testing.T) {
	cases := []struct {
		name      string
		requested string
		f         kernel.Features
		want      mode.Name
		// reasonHas / errHas: substrings the reason or error must contain.
		reasonHas, errHas []string
	}{
		{name: "auto picks iptables", f: features(nil), want: mode.IPTables, reasonHas: []string{"iptables mode runs here", "nft"}},
		{name: "auto on this host", f: features(thisHost), want: mode.IPTables},
		{
			name: "auto falls back to userspace without DNAT", want: mode.Userspace,
			f: features(func(f *kernel.Features) {
				f.IPv4.NFT.DNAT = false
				f.IPv4.NFT.Problem = "DNAT: iptables v1.8.9 (nf_tables): Couldn't load target `DNAT'"
			}),
			reasonHas: []string{"falling back to userspace", "cannot load the DNAT target", "Couldn't load target `DNAT'"},
		},
		{
			// A node without netfilter: the userspace mode's local portals
			// need none.
			name: "auto with no backend", f: features(noBackend), want: mode.Userspace,
			reasonHas: []string{"falling back to userspace", "no iptables backend is usable", "iptables-nft-save: not installed"},
		},
		{
			name: "auto with neither DNAT nor REDIRECT", want: mode.Userspace,
			f: features(func(f *kernel.Features) {
				f.IPv4.NFT.DNAT, f.IPv4.NFT.Redirect = false, false
			}),
			reasonHas: []string{"falling back to userspace", "cannot load the DNAT target"},
		},
		{name: "explicit userspace without netfilter", requested: "userspace", f: features(noBackend), want: mode.Userspace},
		{name: "explicit iptables", requested: "iptables", f: features(thisHost), want: mode.IPTables, reasonHas: []string{"requested"}},
		{name: "explicit ipvs with everything", requested: "ipvs", f: features(nil), want: mode.IPVS},
		{name: "explicit userspace", requested: "userspace", f: features(thisHost), want: mode.Userspace},
		{
			name: "userspace with REDIRECT only", requested: "userspace", want: mode.Userspace,
			f: features(func(f *kernel.Features) { f.IPv4.NFT.DNAT = false }),
		},
		{name: "mode names are case-insensitive", requested: " IPTables ", f: features(nil), want: mode.IPTables},
		{
			name: "ipvs on this host", requested: "ipvs", f: features(thisHost),
			errHas: []string{`--proxy-mode=ipvs cannot run on this kernel: IPVS is absent (no generic netlink family "IPVS"; is the ip_vs module available?), and dummy links are not supported; --proxy-mode=iptables or --proxy-mode=userspace would work here`},
		},
		{
			name: "ipvs without ipset", requested: "ipvs",
			f: features(func(f *kernel.Features) {
				f.IPSet = kernel.Support{Detail: "the kernel has no ip_set support (modules ip_set, ip_set_hash_ip): invalid argument"}
			}),
			errHas: []string{"ipset is unusable (the kernel has no ip_set support (modules ip_set, ip_set_hash_ip): invalid argument)", "--proxy-mode=iptables or --proxy-mode=userspace would work here"},
		},
		{
			name: "iptables without DNAT names userspace", requested: "iptables",
			f:      features(func(f *kernel.Features) { f.IPv4.NFT.DNAT = false; thisHost(f) }),
			errHas: []string{"--proxy-mode=iptables cannot run on this kernel: the nat table of iptables-nft cannot load the DNAT target", "; --proxy-mode=userspace would work here"},
		},
		{
			name: "nothing works", requested: "ipvs", f: features(func(f *kernel.Features) { thisHost(f); noBackend(f) }),
			errHas: []string{"IPVS is absent", "dummy links are not supported", ", and no iptables backend is usable", "; --proxy-mode=userspace would work here"},
		},
		{name: "unknown mode", requested: "kernelspace", f: features(nil), errHas: []string{`unknown --proxy-mode "kernelspace"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			def, reason, err := Choose(c.requested, c.f)
			got := def.Name
			if len(c.errHas) > 0 {
				if err == nil {
					t.Fatalf("Choose(%q) = %q (%s), want an error", c.requested, got, reason)
				}
				for _, s := range c.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q\n lacks %q", err, s)
					}
				}
				if got != "" {
					t.Errorf("mode %q returned with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Choose(%q): %v", c.requested, err)
			}
			if got != c.want {
				t.Errorf("Choose(%q) = %q, want %q", c.requested, got, c.want)
			}
			if reason == "" {
				t.Errorf("empty reason")
			}
			for _, s := range c.reasonHas {
				if !strings.Contains(reason, s) {
					t.Errorf("reason %q lacks %q", reason, s)
				}
			}
		})
	}
}
