package kernel

import (
	"strings"
	"testing"

	"kproxy.dev/kproxy/sync/mode"
)

// fullIPTables is a backend that can do everything.
var fullIPTables = IPTables{Usable: true, DNAT: true, Redirect: true, RandomFully: true}

func features(edit func(f *Features)) Features {
	f := Features{
		IPv4:          FamilyIPTables{NFT: fullIPTables, Legacy: fullIPTables},
		IPv6:          FamilyIPTables{NFT: fullIPTables, Legacy: fullIPTables},
		Backend:       NFT,
		BackendReason: "no kube rules in either backend; nft is preferred",
		Conntrack:     Support{Present: true},
		IPVS:          Support{Present: true},
		IPSet:         Support{Present: true},
		DummyLinks:    Support{Present: true},
		SCTP:          Support{Present: true},
	}
	if edit != nil {
		edit(&f)
	}
	return f
}

// notProbed is a legacy backend Detect left alone on an nft node.
var notProbed = IPTables{NotProbed: true, Problem: LegacyNotProbed}

// thisHost is what the CI machine reports.
func thisHost(f *Features) {
	f.IPv4.Legacy, f.IPv6.Legacy = notProbed, notProbed
	f.IPVS = Support{Detail: `no generic netlink family "IPVS"; is the ip_vs module available?`}
	f.DummyLinks = Support{Detail: "the kernel does not know the dummy link type (no dummy module)"}
	f.SCTP = Support{Detail: "no sctp"}
}

func noBackend(f *Features) {
	f.IPv4 = FamilyIPTables{NFT: IPTables{Problem: "listing rules: iptables-nft-save: not installed"}, Legacy: IPTables{Problem: "listing rules: iptables-legacy-save: not installed"}}
	f.Backend, f.BackendReason = chooseBackend(f.IPv4, f.IPv6)
}

func TestChoose(t *testing.T) {
	cases := []struct {
		name      string
		requested string
		f         Features
		want      mode.Name
		// reasonHas / errHas: substrings the reason or error must contain.
		reasonHas, errHas []string
	}{
		{name: "auto picks iptables", f: features(nil), want: mode.IPTables, reasonHas: []string{"iptables mode runs here", "nft"}},
		{name: "auto on this host", f: features(thisHost), want: mode.IPTables},
		{
			name: "auto falls back to userspace without DNAT", want: mode.Userspace,
			f: features(func(f *Features) {
				f.IPv4.NFT.DNAT = false
				f.IPv4.NFT.Problem = "DNAT: iptables v1.8.9 (nf_tables): Couldn't load target `DNAT'"
			}),
			reasonHas: []string{"falling back to userspace", "cannot load the DNAT target", "Couldn't load target `DNAT'"},
		},
		{
			name: "auto with no backend", f: features(noBackend),
			errHas: []string{"no proxy mode can run", "no iptables backend is usable", "iptables-nft-save: not installed"},
		},
		{
			name: "auto with neither DNAT nor REDIRECT",
			f: features(func(f *Features) {
				f.IPv4.NFT.DNAT, f.IPv4.NFT.Redirect = false, false
			}),
			errHas: []string{"neither the REDIRECT nor the DNAT target"},
		},
		{name: "explicit iptables", requested: "iptables", f: features(thisHost), want: mode.IPTables, reasonHas: []string{"requested"}},
		{name: "explicit ipvs with everything", requested: "ipvs", f: features(nil), want: mode.IPVS},
		{name: "explicit userspace", requested: "userspace", f: features(thisHost), want: mode.Userspace},
		{
			name: "userspace with REDIRECT only", requested: "userspace", want: mode.Userspace,
			f: features(func(f *Features) { f.IPv4.NFT.DNAT = false }),
		},
		{name: "mode names are case-insensitive", requested: " IPTables ", f: features(nil), want: mode.IPTables},
		{
			name: "ipvs on this host", requested: "ipvs", f: features(thisHost),
			errHas: []string{`--proxy-mode=ipvs cannot run on this kernel: IPVS is absent (no generic netlink family "IPVS"; is the ip_vs module available?), and dummy links are not supported; --proxy-mode=iptables or --proxy-mode=userspace would work here`},
		},
		{
			name: "ipvs without ipset", requested: "ipvs",
			f: features(func(f *Features) {
				f.IPSet = Support{Detail: "the kernel has no ip_set support (modules ip_set, ip_set_hash_ip): invalid argument"}
			}),
			errHas: []string{"ipset is unusable (the kernel has no ip_set support (modules ip_set, ip_set_hash_ip): invalid argument)", "--proxy-mode=iptables or --proxy-mode=userspace would work here"},
		},
		{
			name: "iptables without DNAT names userspace", requested: "iptables",
			f:      features(func(f *Features) { f.IPv4.NFT.DNAT = false; thisHost(f) }),
			errHas: []string{"--proxy-mode=iptables cannot run on this kernel: the nat table of iptables-nft cannot load the DNAT target", "; --proxy-mode=userspace would work here"},
		},
		{
			name: "nothing works", requested: "ipvs", f: features(func(f *Features) { thisHost(f); noBackend(f) }),
			errHas: []string{"IPVS is absent", "dummy links are not supported", ", and no iptables backend is usable", "no other proxy mode would work here either"},
		},
		{name: "unknown mode", requested: "kernelspace", f: features(nil), errHas: []string{`unknown --proxy-mode "kernelspace"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, reason, err := Choose(c.requested, c.f)
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

func TestChooseBackend(t *testing.T) {
	unusable := IPTables{Problem: "broken"}
	withKube := func(t IPTables, n int) IPTables { t.KubeRules = n; return t }
	cases := []struct {
		name   string
		v4, v6 FamilyIPTables
		want   Backend
	}{
		{"fresh node prefers nft", FamilyIPTables{NFT: fullIPTables, Legacy: fullIPTables}, FamilyIPTables{}, NFT},
		{"legacy rules win", FamilyIPTables{NFT: fullIPTables, Legacy: withKube(fullIPTables, 5)}, FamilyIPTables{}, Legacy},
		{"IPv6 legacy rules count", FamilyIPTables{NFT: fullIPTables, Legacy: fullIPTables}, FamilyIPTables{Legacy: withKube(fullIPTables, 1)}, Legacy},
		{"more nft rules win", FamilyIPTables{NFT: withKube(fullIPTables, 9), Legacy: withKube(fullIPTables, 2)}, FamilyIPTables{}, NFT},
		{"tie goes to nft", FamilyIPTables{NFT: withKube(fullIPTables, 3), Legacy: withKube(fullIPTables, 3)}, FamilyIPTables{}, NFT},
		{"legacy rules but legacy unusable", FamilyIPTables{NFT: fullIPTables, Legacy: withKube(unusable, 4)}, FamilyIPTables{}, NFT},
		{"nft unusable", FamilyIPTables{NFT: unusable, Legacy: fullIPTables}, FamilyIPTables{}, Legacy},
		{"none usable", FamilyIPTables{NFT: unusable, Legacy: unusable}, FamilyIPTables{}, ""},
		{"legacy not probed", FamilyIPTables{NFT: fullIPTables, Legacy: notProbed}, FamilyIPTables{NFT: fullIPTables, Legacy: notProbed}, NFT},
	}
	for _, c := range cases {
		got, reason := chooseBackend(c.v4, c.v6)
		if got != c.want {
			t.Errorf("%s: chooseBackend = %q (%s), want %q", c.name, got, reason, c.want)
		}
		if reason == "" {
			t.Errorf("%s: empty reason", c.name)
		}
	}
}
