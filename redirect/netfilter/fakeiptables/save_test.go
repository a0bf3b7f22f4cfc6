package fakeiptables

import (
	"context"
	"slices"
	"testing"

	"kproxy.dev/kproxy/sync/ipfamily"
)

func TestSave(t *testing.T) {
	f := New(ipfamily.IPv6)
	natEmpty := "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n"
	if got := f.Save(""); got != "" {
		t.Errorf("a new fake saves %q, want no tables", got)
	}
	if got := f.Save("nat"); got != natEmpty {
		t.Errorf("Save(nat) on a new fake = %q, want its empty built-in chains", got)
	}
	// Chains are declared out of order; the dump orders them as both real
	// tools do (checked against them in TestFakeSavesLikeTheRealTools).
	payload := "*nat\n:KUBE-ZED - [0:0]\n:KUBE-B - [0:0]\n:KUBE-A - [0:0]\n-A KUBE-A -d fd00:18::1/128 -j RETURN\n-A KUBE-ZED -j RETURN\n-A KUBE-B -j RETURN\n-A OUTPUT -j KUBE-B\nCOMMIT\n" +
		"*raw\n:KUBE-R - [0:0]\nCOMMIT\n"
	if _, err := f.Run(context.Background(), []byte(payload), "ip6tables-legacy-restore", "--noflush"); err != nil {
		t.Fatal(err)
	}
	nat := "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" +
		":KUBE-A - [0:0]\n:KUBE-B - [0:0]\n:KUBE-ZED - [0:0]\n" +
		"-A OUTPUT -j KUBE-B\n-A KUBE-A -d fd00:18::1/128 -j RETURN\n-A KUBE-B -j RETURN\n-A KUBE-ZED -j RETURN\nCOMMIT\n"
	raw := "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-R - [0:0]\nCOMMIT\n"
	if got := f.Save(""); got != nat+raw {
		t.Errorf("Save() =\n%s\nwant\n%s", got, nat+raw)
	}
	out, err := f.Run(context.Background(), nil, "ip6tables-nft-save", "-t", "nat")
	if err != nil || string(out) != nat {
		t.Errorf("ip6tables-nft-save -t nat = %q, %v; want\n%s", out, err, nat)
	}
	if got := f.Rules("nat", "KUBE-A"); !slices.Equal(got, []string{"-A KUBE-A -d fd00:18::1/128 -j RETURN"}) {
		t.Errorf("Rules(nat, KUBE-A) = %q", got)
	}
	if f.Rules("nat", "KUBE-NONE") != nil || f.HasChain("nat", "KUBE-NONE") || !f.HasChain("raw", "KUBE-R") {
		t.Error("Rules/HasChain disagree with the tables")
	}
}
