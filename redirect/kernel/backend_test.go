package kernel

import "testing"

// fullIPTables is a backend that can do everything.
var fullIPTables = IPTables{Usable: true, DNAT: true, Redirect: true, RandomFully: true}

// notProbed is a legacy backend Detect left alone on an nft node.
var notProbed = IPTables{NotProbed: true, Problem: LegacyNotProbed}

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
